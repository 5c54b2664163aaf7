package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/idemkit/idemkit/internal/wire"
)

// The answers the middleware gives itself, without the handler: problems
// (a rejection, a store failure, an outcome that is unknown, ...) and the
// answer from a live record (a replay, a 409 or a 422). The dispatcher and
// the modes (lease.go, tx.go, held.go, legacy.go) share them; they depend on
// neither.

// Problem details shared by several answers.
const (
	detailCanceled = "The request was canceled before it was processed; nothing was applied. Retry with the same Idempotency-Key."
	detailInFlight = "A request with this Idempotency-Key is still being processed. Retry after the delay in Retry-After."
)

// answer is how the middleware answered a request: what the dispatcher's
// checks and the modes return. The Event is built from it and from the
// request's trace (eventOf); nothing else sets Event's fields.
type answer struct {
	outcome Outcome
	status  int
	err     error
	// storeErr is the operation of the failed store call the answer
	// reports ("claim", "quota", ...), or "": the last of
	// Event.StoreErrors.
	storeErr string
	// originalRequestID is, for a replay (or a refused one), the stored
	// correlation id.
	originalRequestID string
	// responseNotCaptured: the handler wrote nothing through the
	// middleware's writer.
	responseNotCaptured bool
	// abort is set when the response must be aborted with
	// http.ErrAbortHandler (the handler panicked with it, or panicked after
	// its response started streaming): the dispatcher panics with it once
	// the event is out.
	abort bool
}

// reject answers a request refused before any claim.
func reject(w http.ResponseWriter, status int, slug, detail string, err error) answer {
	writeProblem(w, status, slug, detail, 0)
	return answer{outcome: OutcomeRejected, status: status, err: err}
}

// outcomeUnknown answers a request whose result may or may not have been
// applied or stored: 503 outcome-unknown, retry with the same key.
func (m *Middleware) outcomeUnknown(w http.ResponseWriter, r *http.Request, scope Scope, err error, detail string) answer {
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idemkit: outcome unknown; answered outcome-unknown",
		scopeAttrs(scope, slog.Any("error", err))...)
	writeProblem(w, http.StatusServiceUnavailable, wire.ProblemOutcomeUnknown, detail, 1)
	return answer{outcome: OutcomeUnknown, status: http.StatusServiceUnavailable, err: fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)}
}

// panicked answers a recovered panic with a 500 problem, or, for
// http.ErrAbortHandler, with an answer that aborts the response (the
// dispatcher panics with it again so that net/http aborts the response).
func (m *Middleware) panicked(w http.ResponseWriter, r *http.Request, scope Scope, pv any) answer {
	if pv == http.ErrAbortHandler { //nolint:errorlint // the sentinel is panicked with as is
		return answer{outcome: OutcomeReleased, status: http.StatusInternalServerError, err: http.ErrAbortHandler, abort: true}
	}
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idemkit: handler panicked; claim released",
		scopeAttrs(scope, slog.Any("panic", pv))...)
	writeProblem(w, http.StatusInternalServerError, wire.ProblemHandlerPanic, "The server failed while handling the request; nothing was stored. Retry with the same Idempotency-Key.", 0)
	return answer{outcome: OutcomeReleased, status: http.StatusInternalServerError, err: fmt.Errorf("idemkit/server: handler panicked: %v", pv)}
}

// canceledInHandler answers a request whose handler returned without
// writing anything after the request's context ended; the claim has been
// released or rolled back.
func (m *Middleware) canceledInHandler(w http.ResponseWriter, r *http.Request, scope Scope, err error) answer {
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "idemkit: handler answered nothing to a canceled request; claim released",
		scopeAttrs(scope, slog.Any("error", err))...)
	writeProblem(w, http.StatusServiceUnavailable, wire.ProblemCanceled,
		detailCanceled, 1)
	return answer{outcome: OutcomeCanceled, status: http.StatusServiceUnavailable, err: err}
}

// answerExisting answers a request whose claim found a live record.
func (m *Middleware) answerExisting(w http.ResponseWriter, r *http.Request, ex *Record, fps requestFingerprint, tr *trace) answer {
	if ex == nil {
		return m.storeFailure(w, r, tr.scope, "claim", errors.New("idemkit/server: store returned no record for an unacquired claim"))
	}
	if !fps.matches(ex) {
		writeProblem(w, http.StatusUnprocessableEntity, wire.ProblemKeyReused,
			"This Idempotency-Key was already used for a different request (method, path or body). Use a new key for a new request.", 0)
		return answer{outcome: OutcomeMismatch, status: http.StatusUnprocessableEntity, err: errFingerprintMismatch}
	}
	if ex.State == StateCompleted {
		if ex.Response == nil {
			return m.storeFailure(w, r, tr.scope, "claim", errors.New("idemkit/server: completed record has no response"))
		}
		return m.replay(w, r, ex, tr)
	}
	writeProblem(w, http.StatusConflict, wire.ProblemInFlight,
		detailInFlight, m.inFlightRetryAfter(r, tr.scope, ex))
	return answer{outcome: OutcomeConflict, status: http.StatusConflict, err: ErrInFlight}
}

// storeFailure answers a store error of the call op before the handler
// ran.
func (m *Middleware) storeFailure(w http.ResponseWriter, r *http.Request, scope Scope, op string, err error) answer {
	if ctxErr := r.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		// The client went away (or a server timeout fired) while the store
		// call waited: not a store failure, and nothing to page anyone for.
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemCanceled,
			detailCanceled, 1)
		m.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "idemkit: request canceled before its claim",
			scopeAttrs(scope, slog.String("op", op), slog.Any("error", err))...)
		return answer{outcome: OutcomeCanceled, status: http.StatusServiceUnavailable, err: err}
	}
	a := answer{outcome: OutcomeStoreError, status: http.StatusServiceUnavailable, err: err, storeErr: op}
	switch {
	case errors.Is(err, ErrInFlight):
		writeProblem(w, http.StatusConflict, wire.ProblemInFlight,
			detailInFlight, 1)
		return answer{outcome: OutcomeConflict, status: http.StatusConflict, err: err}
	case errors.Is(err, ErrStoreBusy):
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemStoreBusy,
			"The idempotency store is busy; the request was not processed. Retry with the same Idempotency-Key.", 1)
	default:
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable,
			"The idempotency store is unavailable; the request was not processed. Retry with the same Idempotency-Key.", 1)
	}
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "idemkit: store error; request not processed",
		scopeAttrs(scope, slog.String("op", op), slog.Any("error", err))...)
	return a
}
