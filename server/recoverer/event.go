package recoverer

import (
	"time"

	"github.com/idemkit/idemkit/server"
)

// Outcome is what a pass did with one claim.
type Outcome string

const (
	// OutcomeCompleted: the RecoverFunc reconstructed the response and the
	// record is completed with it; retries replay it.
	OutcomeCompleted Outcome = "completed"
	// OutcomeReleased: the RecoverFunc found the effect never made and the
	// record was released; a retry runs the handler.
	OutcomeReleased Outcome = "released"
	// OutcomeFailed: the RecoverFunc or a store call failed, or the
	// recoverer's own claim was taken over before it could write; the
	// record is left for a later pass (Event.Err says why).
	OutcomeFailed Outcome = "failed"
	// OutcomeSkipped: the claim was not acted on (Event.Reason says why).
	OutcomeSkipped Outcome = "skipped"
)

// Outcomes lists every Outcome, for metrics that start every series at
// zero.
var Outcomes = []Outcome{OutcomeCompleted, OutcomeReleased, OutcomeFailed, OutcomeSkipped}

// Reasons of an OutcomeSkipped.
const (
	// ReasonLive: the lease ended less than Config.MinAge ago, or has not
	// ended (a live holder); the store was not asked.
	ReasonLive = "live"
	// ReasonHeld: the store refused the takeover: another recoverer or a
	// client retry took the claim first, the holder extended its lease, or
	// the record was completed meanwhile.
	ReasonHeld = "held"
	// ReasonGone: the record was released or expired between the listing
	// and the takeover; the recoverer's claim found nothing to recover and
	// was released at once.
	ReasonGone = "gone"
	// ReasonExpiring: the record expires within two Config.Lease; it is
	// left to expire.
	ReasonExpiring = "expiring"
	// ReasonGaveUp: the RecoverFunc failed Config.MaxAttempts times on this
	// claim.
	ReasonGaveUp = "gave_up"
)

// Event is what a pass did with one claim, for Config.OnEventFunc.
type Event struct {
	Scope   server.Scope
	Outcome Outcome
	// Reason says why a claim was skipped (ReasonLive, ReasonHeld, ...);
	// empty for the other outcomes.
	Reason string
	// Token is the recoverer's fencing token when it took the claim over;
	// PreviousToken the dead holder's. Both are 0 when it did not.
	Token, PreviousToken int64
	// Attempt is the number of times the recoverer took this claim over,
	// this one included; 0 when it did not.
	Attempt int
	// Err is why an OutcomeFailed failed.
	Err error
	// Duration is how long the pass spent on the claim: the takeover,
	// the RecoverFunc and the completion or release.
	Duration time.Duration
}
