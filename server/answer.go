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

// reject answers a request refused before any claim.
func (m *Middleware) reject(w http.ResponseWriter, ev *Event, status int, slug, detail string) {
	ev.Outcome, ev.Status = OutcomeRejected, status
	writeProblem(w, status, slug, detail, 0)
}

// outcomeUnknown answers a request whose result may or may not have been
// applied or stored: 503 outcome-unknown, retry with the same key.
func (m *Middleware) outcomeUnknown(w http.ResponseWriter, r *http.Request, ev *Event, err error, detail string) {
	ev.Outcome, ev.Status, ev.Err = OutcomeUnknown, http.StatusServiceUnavailable, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idemkit: outcome unknown; answered outcome-unknown",
		scopeAttrs(ev.Scope, slog.Any("error", err))...)
	writeProblem(w, http.StatusServiceUnavailable, wire.ProblemOutcomeUnknown, detail, 1)
}

// panicked answers a recovered panic with a 500 problem, or re-panics
// http.ErrAbortHandler so that net/http aborts the response.
func (m *Middleware) panicked(w http.ResponseWriter, r *http.Request, ev *Event, pv any) {
	ev.Outcome, ev.Status = OutcomeReleased, http.StatusInternalServerError
	if pv == http.ErrAbortHandler { //nolint:errorlint // the sentinel is panicked with as is
		ev.Err = http.ErrAbortHandler
		panic(pv)
	}
	ev.Err = fmt.Errorf("idemkit/server: handler panicked: %v", pv)
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idemkit: handler panicked; claim released",
		scopeAttrs(ev.Scope, slog.Any("panic", pv))...)
	writeProblem(w, http.StatusInternalServerError, wire.ProblemHandlerPanic, "The server failed while handling the request; nothing was stored. Retry with the same Idempotency-Key.", 0)
}

// canceledInHandler answers a request whose handler returned without
// writing anything after the request's context ended; the claim has been
// released or rolled back.
func (m *Middleware) canceledInHandler(w http.ResponseWriter, r *http.Request, ev *Event, err error) {
	ev.Outcome, ev.Status, ev.Err = OutcomeCanceled, http.StatusServiceUnavailable, err
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "idemkit: handler answered nothing to a canceled request; claim released",
		scopeAttrs(ev.Scope, slog.Any("error", err))...)
	writeProblem(w, http.StatusServiceUnavailable, wire.ProblemCanceled,
		detailCanceled, 1)
}

// answerExisting answers a request whose claim found a live record.
func (m *Middleware) answerExisting(w http.ResponseWriter, r *http.Request, ex *Record, fps requestFingerprint, ev *Event) {
	if ex == nil {
		m.storeFailure(w, r, ev, "claim", errors.New("idemkit/server: store returned no record for an unacquired claim"))
		return
	}
	if !fps.matches(ex) {
		ev.Outcome, ev.Status, ev.Err = OutcomeMismatch, http.StatusUnprocessableEntity, errFingerprintMismatch
		writeProblem(w, http.StatusUnprocessableEntity, wire.ProblemKeyReused,
			"This Idempotency-Key was already used for a different request (method, path or body). Use a new key for a new request.", 0)
		return
	}
	if ex.State == StateCompleted {
		if ex.Response == nil {
			m.storeFailure(w, r, ev, "claim", errors.New("idemkit/server: completed record has no response"))
			return
		}
		m.replay(w, r, ex, ev)
		return
	}
	ev.Outcome, ev.Status, ev.Err = OutcomeConflict, http.StatusConflict, ErrInFlight
	writeProblem(w, http.StatusConflict, wire.ProblemInFlight,
		detailInFlight, m.inFlightRetryAfter(r, ev.Scope, ex))
}

// storeFailure answers a store error before the handler ran.
func (m *Middleware) storeFailure(w http.ResponseWriter, r *http.Request, ev *Event, op string, err error) {
	ev.Err = err
	if ctxErr := r.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		// The client went away (or a server timeout fired) while the store
		// call waited: not a store failure, and nothing to page anyone for.
		ev.Outcome, ev.Status = OutcomeCanceled, http.StatusServiceUnavailable
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemCanceled,
			detailCanceled, 1)
		m.cfg.Logger.LogAttrs(r.Context(), slog.LevelDebug, "idemkit: request canceled before its claim",
			scopeAttrs(ev.Scope, slog.String("op", op), slog.Any("error", err))...)
		return
	}
	switch {
	case errors.Is(err, ErrInFlight):
		ev.Outcome, ev.Status = OutcomeConflict, http.StatusConflict
		writeProblem(w, http.StatusConflict, wire.ProblemInFlight,
			detailInFlight, 1)
		return
	case errors.Is(err, ErrStoreBusy):
		ev.StoreErrors = append(ev.StoreErrors, op)
		ev.Outcome, ev.Status = OutcomeStoreError, http.StatusServiceUnavailable
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemStoreBusy,
			"The idempotency store is busy; the request was not processed. Retry with the same Idempotency-Key.", 1)
	default:
		ev.StoreErrors = append(ev.StoreErrors, op)
		ev.Outcome, ev.Status = OutcomeStoreError, http.StatusServiceUnavailable
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable,
			"The idempotency store is unavailable; the request was not processed. Retry with the same Idempotency-Key.", 1)
	}
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "idemkit: store error; request not processed",
		scopeAttrs(ev.Scope, slog.String("op", op), slog.Any("error", err))...)
}
