package server

import "time"

// Outcome says what the middleware did with a request.
type Outcome string

const (
	// OutcomeExecuted: the handler ran and its response was stored.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReplayed: a stored response was sent; the handler did not run.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeConflict: 409, another attempt with the key is in progress.
	OutcomeConflict Outcome = "conflict"
	// OutcomeMismatch: 422, the key was used with a different request.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeRejected: 400, 401, 413 or 429 (a quota) before any claim.
	OutcomeRejected Outcome = "rejected"
	// OutcomeReleased: the handler ran, its response was sent and nothing
	// was stored: the claim was released (or rolled back), so a retry runs
	// the handler again. The handler answered 5xx or panicked (Status 500),
	// or its response is one the middleware does not store: a status that
	// says nothing happened yet (404, 405, 408, 409, 425, 429), or one the
	// handler marked with MarkNotStored.
	OutcomeReleased Outcome = "released"
	// OutcomeStoreError: 503, the store failed; the handler did not run, or
	// (transactional mode) its effect was rolled back.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeUnknown: 503 outcome-unknown; the middleware cannot tell
	// whether the result was applied or stored (a COMMIT whose answer was
	// lost, a lease lost while the handler ran). A retry with the same key
	// finds out.
	OutcomeUnknown Outcome = "unknown"
	// OutcomeCanceled: the request's context ended before the key was
	// claimed (the client went away), or the handler then returned without
	// writing anything; nothing is stored and nothing is held.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeReplayRefused: 403 replay-forbidden; Config.AuthorizeReplayFunc
	// refused to serve a completed record to this request. Nothing was
	// sent of the stored response.
	OutcomeReplayRefused Outcome = "replay_refused"
)

// Event describes one keyed request, for Config.OnEventFunc.
type Event struct {
	// Scope is the request's scope; empty for requests rejected before it
	// was known.
	Scope   Scope
	Outcome Outcome
	// Status is the status sent to the client.
	Status int
	// Token is the fencing token of the claim the handler ran under.
	Token int64
	// TakenOver is true when the claim took over a lapsed lease.
	TakenOver bool
	// Err is the error behind the outcome, if any: the store error, a lost
	// lease, the PrincipalFunc error, a key error, a recovered panic.
	Err error
	// Duration is the time the middleware spent on the request.
	Duration time.Duration
	// ClaimDuration is how long the claim call took; 0 when the request
	// made none (rejected before, or answered by a read).
	ClaimDuration time.Duration
	// Released is true when a claim the request made was released, or its
	// transaction rolled back, so that a retry runs the handler again: after
	// a 5xx, a panic, a response that is not stored, or a gone client.
	Released bool
	// LeaseLost counts the store's refusals of this request's completion,
	// release or lease extension because its fencing token was no longer
	// current, and the leases that ran out while the handler ran.
	LeaseLost int
	// ResponseNotCaptured is true when the handler returned without writing
	// anything through the middleware's ResponseWriter (no WriteHeader, no
	// Write): it wrote around it, or answered nothing. The record was
	// completed as response-not-captured, so a retry gets that problem and
	// the handler never runs again for the key; Err says so too.
	ResponseNotCaptured bool
	// StoreErrors lists, in order, the operation of every store call of
	// the request that failed other than by a lost lease: "claim", "begin",
	// "get", "get_legacy", "usage", "quota" (a refusal by quota),
	// "complete", "commit", "release", "extend_lease".
	StoreErrors []string
	// Waited is how long the request waited for an in-flight original
	// (Config.WaitInFlight) before its answer; 0 if it did not wait.
	Waited time.Duration
	// WaitRefused is true when the request found its key in flight but
	// could not wait because Config.MaxWaiting or
	// Config.MaxWaitingPerPrincipal was reached: it was answered 409 at
	// once.
	WaitRefused bool
	// RequestID is the request's correlation id (Config.CorrelationIDFunc),
	// or "" if it had none (or an invalid one).
	RequestID string
	// OriginalRequestID is, on a replay (or a refused one), the correlation
	// id of the request whose response was stored; "" if it had none or
	// the record predates correlation ids.
	OriginalRequestID string
}

// eventOf is the Event of a request answered a, with tr what befell it on
// the way, after took. It is the one place an Event is built.
func eventOf(tr *trace, a answer, took time.Duration) Event {
	storeErrors := tr.storeErrors
	if a.storeErr != "" {
		storeErrors = append(storeErrors, a.storeErr)
	}
	return Event{
		Scope:               tr.scope,
		Outcome:             a.outcome,
		Status:              a.status,
		Token:               tr.token,
		TakenOver:           tr.takenOver,
		Err:                 a.err,
		Duration:            took,
		ClaimDuration:       tr.claimDuration,
		Released:            tr.released,
		LeaseLost:           tr.leaseLost,
		ResponseNotCaptured: a.responseNotCaptured,
		StoreErrors:         storeErrors,
		Waited:              tr.waited,
		WaitRefused:         tr.waitRefused,
		RequestID:           tr.requestID,
		OriginalRequestID:   a.originalRequestID,
	}
}
