package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// MaxBodySize is the most of a response body kept as an intent's outcome
// (10 MiB); a backend reads up to MaxBodySize+1 bytes to tell a longer
// body apart.
const MaxBodySize = 10 << 20

// Kind is what happens to an intent after one attempt.
type Kind int

const (
	// Retry: the intent stays pending; its next attempt starts at
	// Decision.At, with the same key.
	Retry Kind = iota + 1
	// Succeeded: a 2xx answer, fresh or replayed.
	Succeeded
	// Failed: a definitive answer that is not a success (a replayed error,
	// a 3xx, a 4xx not retried), or the retry policy gave up.
	Failed
	// KeyReused: the server said the key was used with another request;
	// the intent ends failed (idemkit.ErrKeyReused).
	KeyReused
	// Unknown: an earlier attempt's answer was lost and this one says
	// nothing about it: the effect may have happened.
	Unknown
	// Expired: no attempt may start before the horizon.
	Expired
)

// State is the name of the intent state kind leads to, as
// idemkit.IntentState spells it: "pending" for Retry, "failed" for
// KeyReused.
func (k Kind) State() string {
	switch k {
	case Retry:
		return "pending"
	case Succeeded:
		return "succeeded"
	case Failed, KeyReused:
		return "failed"
	case Unknown:
		return "unknown"
	case Expired:
		return "expired"
	}
	return ""
}

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Retry:
		return "retry"
	case KeyReused:
		return "key-reused"
	}
	return k.State()
}

// Facts are what Decide reads: the result of one attempt and what came
// before it.
type Facts struct {
	// Now is when the attempt's result arrived.
	Now time.Time
	// Attempt is the number of the attempt (1 for the first).
	Attempt int
	// Retries is the number of waits so far, the backoff's exponent: it
	// keeps growing across reschedules and restarts.
	Retries int
	// Profile is the host's dialect (with its defaults filled in).
	Profile *Profile
	// Resp is the answer (its body read, readable again), nil when the
	// attempt got none.
	Resp *http.Response
	// Body is the answer's body as read: up to MaxBodySize+1 bytes.
	Body []byte
	// Err is the transport error when Resp is nil.
	Err error
	// Unsendable is set when the attempt's request could not even be built
	// (a bad stored row): nothing was sent.
	Unsendable error
	// Skipped is set when the attempt was not sent because the send hook
	// refused it.
	Skipped error
	// CheckRetry is the retry policy, asked only when the profile does
	// not decide. Defaults to DefaultCheckRetry.
	CheckRetry CheckRetryFunc
	// Backoff is the wait before a retry. Defaults to DefaultBackoff.
	Backoff BackoffFunc
	// Unanswered is the number of the first earlier attempt whose answer
	// was lost although it may have been sent, 0 if none.
	Unanswered int
	// Horizon is the intent's horizon at this attempt.
	Horizon Horizon
	// Budget is the attempt budget, Oldest counting this attempt.
	Budget Budget
	// Probe, when positive, caps the wait after an attempt that got no
	// answer: this intent probes its host at that interval (the SQLite
	// client's probes; zero for a backend without them).
	Probe time.Duration
}

// Decision is what happens to the intent after one attempt: Decide's
// result, applied by the backend in one persistence call.
type Decision struct {
	// Kind is what happens: Retry, or a terminal kind.
	Kind Kind
	// Reason is the intent's last error after this attempt: why it is
	// retried, or why it ended ("" for a success).
	Reason string
	// At is when the next attempt may start (Retry).
	At time.Time
	// ServerDirected: At honours the answer's Retry-After.
	ServerDirected bool
	// InFlight: retried because a 409 no profile classifies followed a
	// lost answer (taken as "still in progress").
	InFlight bool
	// Budgeted: At was pushed back by the attempt budget.
	Budgeted bool
	// Probing: At was capped at Facts.Probe.
	Probing bool

	// Answered: the answer is the intent's outcome, to be stored (a
	// terminal kind other than Expired; not when the policy gave up).
	Answered bool
	// Status is the answer's status, 0 without one.
	Status int
	// Replayed: the answer carries the profile's replay marker.
	Replayed bool
	// Reading is the profile's reading of the answer.
	Reading Reading
	// AttemptError is the attempt log's error text: the transport error
	// (URLs stripped), or why nothing was sent.
	AttemptError string
	// NotSent: the attempt provably never left the process.
	NotSent bool
	// Learned is the Idempotency-Window the answer advertised (0: none).
	Learned time.Duration
	// Horizon is the intent's horizon after this attempt (Learned may
	// have moved it earlier).
	Horizon Horizon
	// Unanswered is Facts.Unanswered after this attempt: this attempt's
	// number if it is the first whose answer was lost.
	Unanswered int
	// Retries is Facts.Retries after this attempt.
	Retries int
}

// Decide is the client's policy for one attempt, a pure function of its
// facts (ctx only reaches CheckRetry): the profile's reading of the answer
// first (a replay is final; then key reused, then "not yet"), then the
// retry policy; an earlier lost answer turns an answer that says nothing
// about it into Unknown, never Failed (see the README's table). A retry
// waits the backoff or the server's Retry-After (never less than
// MinServerWait plus the backoff), at least the profile's Answer.Wait,
// capped at Probe after a lost answer, delayed by the budget, and cut short
// by the horizon: past it, the intent expires.
func Decide(ctx context.Context, f Facts) Decision {
	d := Decision{Horizon: f.Horizon, Unanswered: f.Unanswered, Retries: f.Retries}
	backoff := f.Backoff
	if backoff == nil {
		backoff = DefaultBackoff
	}
	switch {
	case f.Unsendable != nil:
		d.NotSent, d.AttemptError = true, f.Unsendable.Error()
		d.Kind = Failed
		if f.Unanswered > 0 {
			d.Kind = Unknown
		}
		d.Reason = unknownPrefix(d.Kind, f.Unanswered) + "cannot build request: " + f.Unsendable.Error()
		return d
	case f.Skipped != nil:
		msg := "send hook: " + f.Skipped.Error()
		d.NotSent, d.AttemptError, d.Reason = true, msg, msg
		next := f.Now.Add(backoff(BackoffBase, BackoffCap, f.Retries, nil))
		if next.After(f.Horizon.At) {
			d.Kind = Expired
			return d
		}
		d.Kind, d.At = Retry, next
		return d
	}

	resp := f.Resp
	if f.Err != nil || resp == nil {
		resp = nil
		d.AttemptError = RedactError(f.Err)
		d.NotSent = NeverSent(f.Err)
	} else {
		d.Status = resp.StatusCode
		if w, ok := ParseWindow(resp.Header); ok {
			d.Learned = w
			d.Horizon = d.Horizon.Learn(w)
		}
		d.Reading = Classify(f.Profile, resp.StatusCode, resp.Header, f.Body)
		d.Replayed = d.Reading.Replayed
	}
	var policyRetry bool
	var policyErr error
	if d.Reading.Verdict == VerdictPolicy {
		check := f.CheckRetry
		if check == nil {
			check = DefaultCheckRetry
		}
		policyRetry, policyErr = check(ctx, resp, f.Err)
	}
	kind, inFlight := judge(d.Status, d.Reading, policyRetry, policyErr, f.Unanswered)

	switch {
	case kind != Retry && (policyErr != nil || resp == nil): // a transport error is no answer
		d.Kind = kind
		d.Reason = unknownPrefix(kind, f.Unanswered) + "gave up: " + RedactError(cmp.Or(policyErr, f.Err))
		return d
	case kind != Retry:
		d.Kind, d.Answered = kind, true
		reason := ""
		if len(f.Body) > MaxBodySize {
			reason = "response body cut at 10 MiB"
		}
		if kind != Succeeded && reason == "" {
			reason = Describe(resp, nil)
		}
		d.Reason = unknownPrefix(kind, f.Unanswered) + reason
		return d
	}

	if resp == nil && !d.NotSent && d.Unanswered == 0 {
		d.Unanswered = f.Attempt // its answer is lost: it may have reached the server
	}
	reason := Describe(resp, f.Err)
	if inFlight {
		d.InFlight = true
		reason += fmt.Sprintf(" (not classified by profile %s; attempt %d's answer was lost, so taken as \"still in progress\" and retried with the same key)", f.Profile.Name, d.Unanswered)
	}
	wait := backoff(BackoffBase, BackoffCap, f.Retries, resp)
	d.Retries = f.Retries + 1
	serverWait, has := RetryAfter(resp, f.Now)
	next, ok := Schedule(f.Now, d.Horizon.At, wait, serverWait, has, d.Reading.MinWait, d.Horizon.Lead())
	if ok && resp == nil && f.Probe > 0 {
		if p := f.Now.Add(f.Probe); p.Before(next) {
			next, d.Probing = p, true
		}
	}
	if ok {
		if at, limited := f.Budget.Allow(next); limited {
			next, d.Budgeted = at, true
			reason += f.Budget.Reason()
			ok = !next.After(d.Horizon.At)
		}
	}
	if !ok {
		d.Kind = Expired
		d.Reason = ExpiredReason(d.Horizon.At, reason)
		return d
	}
	d.Kind, d.At, d.ServerDirected, d.Reason = Retry, next, has, reason
	return d
}

// ExpiredReason is the last error of an intent whose horizon was reached
// without a definitive answer; lastErr is the one before.
func ExpiredReason(horizon time.Time, lastErr string) string {
	msg := "horizon " + wire.FormatTime(horizon) + " reached without a definitive answer"
	if lastErr != "" {
		msg += "; last error: " + lastErr
	}
	return msg
}

// What one attempt's result means for its intent, given what came before:
// a pure function of the answer, the profile's reading of it, the retry
// policy's, and whether an earlier attempt's answer was lost.
//
// An answer that is not a success and not a replay speaks only for the
// attempt it answers. When an earlier attempt with the same key got no
// answer (a timeout, a reset, a process interrupted mid-attempt), that
// attempt may have reached the handler and taken effect, and an answer
// produced before the server looked the key up (a 401 for a credential
// pasted wrong, a 403, a 400 from a gateway, a proxy's error page) says
// nothing about it. Such an answer never ends the intent failed (failed
// invites a retry under a new key, which would do it twice): it ends
// Unknown. A 409 the profile cannot classify, after such a loss, is most
// likely the server's "a request with this key is still in progress" in a
// dialect nobody told us about: it is retried with the same key like the
// profile's in-flight answers, bounded by the horizon and the budget.
// Without a lost answer before it, a 409 may be a business answer
// ("already paid") and is left to the policy.
func judge(status int, r Reading, policyRetry bool, policyErr error, unanswered int) (k Kind, inFlight bool) {
	ok := status >= 200 && status <= 299
	switch {
	case r.Verdict == VerdictKeyReused:
		return KeyReused, false // about the key itself: definitive
	case r.Verdict == VerdictWithheld:
		return Unknown, false // processed, its answer withheld: maybe done
	case r.Replayed && ok:
		return Succeeded, false
	case r.Replayed:
		return Failed, false // the server's stored answer to this request
	case r.Verdict == VerdictRetry:
		return Retry, false
	case r.Verdict == VerdictPolicy && policyRetry && policyErr == nil:
		return Retry, false
	case ok && policyErr == nil:
		return Succeeded, false
	case unanswered == 0:
		return Failed, false
	case status == http.StatusConflict && policyErr == nil:
		return Retry, true
	}
	return Unknown, false
}

// unknownPrefix is the start of the last error of an intent ending in
// kind: for Unknown, which attempt's answer was lost and what to do.
func unknownPrefix(kind Kind, unanswered int) string {
	if kind != Unknown {
		return ""
	}
	if unanswered == 0 {
		return "outcome unknown: the server processed a request with this key but withholds its answer from this caller; reconcile once allowed (resend under the same key, or check), never retry under a new key: "
	}
	return fmt.Sprintf("outcome unknown: attempt %d got no answer (it may have taken effect) and the last answer says nothing about it; reconcile with the server (resend under the same key, or check), never retry under a new key: ", unanswered)
}

// Describe is the short text of an attempt's result for an intent's last
// error: the transport error, or the status and any Retry-After.
func Describe(resp *http.Response, err error) string {
	if err != nil {
		return RedactError(err)
	}
	if resp == nil {
		return ""
	}
	msg := fmt.Sprintf("status %d", resp.StatusCode)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		msg += " (Retry-After: " + ra + ")"
	}
	return msg
}

// RedactError strips URLs (which may carry secrets in their query) from
// transport errors.
func RedactError(err error) string {
	if err == nil {
		return ""
	}
	var ue interface {
		Unwrap() error
		Timeout() bool
	}
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}
