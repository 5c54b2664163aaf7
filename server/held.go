package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// heldClaim is a claim the middleware holds while the handler runs: a lease
// (lease mode) or an open transaction (transactional mode). The handler's
// outcome ends it one of two ways: finish stores the response, abandon frees
// the key so that a retry runs the handler again.
type heldClaim interface {
	// finish stores resp for the claim: the lease-mode completion, or the
	// transaction's completion and COMMIT.
	finish(ctx context.Context, r *http.Request, resp *StoredResponse) error
	// abandon frees the claim and stores nothing: the lease is released,
	// the transaction (and the handler's effect in it) rolled back.
	abandon(ctx context.Context, r *http.Request)
	// lostErr returns why the claim was lost while the handler ran (a
	// lease taken over or run out), or nil.
	lostErr() error
	// effectSurvivesFailure reports whether the handler's effect stands
	// when finish fails: a lease-mode effect lives outside the store, so
	// the response is sent anyway; a transaction's rolled back with it.
	effectSurvivesFailure() bool
	// answerFailure answers a request whose finish failed with err, unless
	// the effect survives failure, and reports whether it answered.
	answerFailure(w http.ResponseWriter, r *http.Request, rec *recorder, err error) (answer, bool)
	// end stops what the claim runs in the background and gives back what
	// it holds; a no-op once the claim was finished or abandoned.
	end()
}

// runHeld runs next under held, buffering its response, and ends the claim
// by the handler's outcome: stored and sent, or abandoned. reqCtx is the
// request's own context (r's may be the handler's, which a lost lease
// cancels), cleanup the same without its cancellation.
func (m *Middleware) runHeld(w http.ResponseWriter, r *http.Request, reqCtx, cleanup context.Context, next http.Handler, held heldClaim, tr *trace) answer {
	// A body over MaxResponseBytes is not stored, so buffering it buys
	// nothing: the outcome is stored without the body as soon as the body
	// grows past the cap, and the rest streams (see heldWriter.Write). In
	// transactional mode the transaction is closed from then on: write the
	// response after the effect.
	hw := &heldWriter{recorder: newRecorder(w, m.cfg.MaxResponseBytes), r: r, ctx: cleanup, held: held, replayHeaders: m.replayHeaders, requestID: tr.requestID}
	rec := hw.recorder
	handlerStart := time.Now()
	pv, panicked := runHandler(next, hw, r)
	m.durations.observe(routeKey(r, tr.scope), time.Since(handlerStart))

	if panicked {
		if rec.streaming {
			// The status and part of the body are out and the record says
			// completed: all that is left is to cut the response short.
			m.cfg.Logger.LogAttrs(reqCtx, slog.LevelError, "idemkit: handler panicked after its response started streaming",
				scopeAttrs(tr.scope, slog.Any("panic", pv))...)
			return answer{abort: true}
		}
		held.abandon(cleanup, r)
		return m.panicked(w, r, tr.scope, pv)
	}
	if !rec.wrote() && reqCtx.Err() != nil {
		// The handler gave up on a client that is gone and answered nothing:
		// no outcome to store. Storing an empty 200 would replay success to
		// the retry; free the key so that the retry runs the handler.
		held.abandon(cleanup, r)
		return m.canceledInHandler(w, r, tr.scope, reqCtx.Err())
	}
	if lost := held.lostErr(); lost != nil && !rec.wrote() {
		// The handler stopped because its lease was lost: whatever it did
		// is unknown, and the claim is (or will be) another attempt's, which
		// is told so. Store nothing and release nothing.
		held.end()
		return m.outcomeUnknown(w, r, tr.scope, lost, "The request's claim was lost while it was being processed, so its outcome is unknown. Retry with the same Idempotency-Key: the retry reconciles and answers the outcome.")
	}
	if !rec.wrote() {
		// The handler returned without a WriteHeader or a Write through
		// the middleware's writer: it wrote around it (a router adapter
		// that hands the handler its own writer), or answered nothing.
		// Its effect happened; storing an empty 200 would replay a success
		// that is not the handler's answer, and freeing the key would run
		// it again. The record is completed with a final problem instead.
		return m.notCaptured(w, r, tr, held)
	}
	status, _ := rec.result()
	if rec.streaming {
		return answer{outcome: OutcomeExecuted, status: status, err: hw.finishErr} // stored at the overflow
	}
	if !stores(r, status) {
		held.abandon(cleanup, r)
		rec.send(nil)
		return answer{outcome: OutcomeReleased, status: status}
	}
	finishErr := hw.finishErr
	if !hw.finished {
		finishErr = held.finish(cleanup, r, rec.stored(m.replayHeaders, rec.overflowed, tr.requestID))
	}
	if finishErr != nil {
		if a, answered := held.answerFailure(w, r, rec, finishErr); answered {
			return a
		}
	}
	rec.send(nil)
	return answer{outcome: OutcomeExecuted, status: status, err: finishErr}
}

// heldWriter is the ResponseWriter a handler under a held claim writes to:
// the recorder, whose overflow it acts on. The write that takes the body
// past Config.MaxResponseBytes stores the outcome without the body (if the
// status is one that is stored) and switches the recorder to streaming,
// unless the claim's effect does not survive a failed finish.
type heldWriter struct {
	*recorder
	r             *http.Request
	ctx           context.Context // the request's, without its cancellation
	held          heldClaim
	replayHeaders map[string]bool
	requestID     string
	// finished is set when the overflow finished the claim, with
	// finishErr what finish returned.
	finished  bool
	finishErr error
}

// Write buffers p, or streams it; see heldWriter.
func (hw *heldWriter) Write(p []byte) (int, error) {
	n, overflow, err := hw.recorder.write(p)
	if overflow && hw.finishAtOverflow() {
		hw.recorder.stream()
	}
	return n, err
}

// finishAtOverflow stores the outcome without the body, unless the status
// is not stored (the claim will be abandoned: keep buffering), and reports
// whether the rest of the body can stream.
func (hw *heldWriter) finishAtOverflow() bool {
	status, _ := hw.recorder.result()
	if !stores(hw.r, status) {
		return false
	}
	hw.finished = true
	hw.finishErr = hw.held.finish(hw.ctx, hw.r, hw.recorder.stored(hw.replayHeaders, true, hw.requestID))
	return hw.finishErr == nil || hw.held.effectSurvivesFailure()
}

// errResponseNotCaptured is the Event.Err of a request whose handler wrote
// nothing through the middleware's writer.
var errResponseNotCaptured = errors.New("idemkit/server: the handler wrote nothing through the middleware's ResponseWriter; its response was not captured (is the middleware mounted so that the handler writes through it?)")

// notCapturedResponse is what a retry of a request whose response was not
// captured gets: a final problem (a replay is never retried).
func notCapturedResponse(requestID string) *StoredResponse {
	return &StoredResponse{
		Status: http.StatusInternalServerError,
		Header: withRequestID(http.Header{"Content-Type": {"application/problem+json"}, "Cache-Control": {"no-store"}}, requestID),
		Body: problemBody(http.StatusInternalServerError, wire.ProblemNotCaptured,
			"The operation ran once, but the server did not capture its response, so it cannot be replayed. Do not retry: check the operation's result another way."),
	}
}

// notCaptured completes the claim of a request whose handler wrote nothing
// through the middleware's writer as "response not captured", logs an
// error and marks the event. The first caller gets whatever the handler
// left on the connection (net/http sends an empty 200 if nothing), and
// every retry the response-not-captured problem.
func (m *Middleware) notCaptured(w http.ResponseWriter, r *http.Request, tr *trace, held heldClaim) answer {
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError,
		"idemkit: the handler wrote nothing through the middleware's ResponseWriter; its outcome is stored as response-not-captured and is never run again for this key",
		scopeAttrs(tr.scope)...)
	rec := newRecorder(w, m.cfg.MaxResponseBytes) // empty: answerFailure may need one
	a := answer{outcome: OutcomeExecuted, err: errResponseNotCaptured}
	if err := held.finish(context.WithoutCancel(r.Context()), r, notCapturedResponse(tr.requestID)); err != nil {
		if failed, answered := held.answerFailure(w, r, rec, err); answered {
			a = failed
		} else {
			a.err = errors.Join(errResponseNotCaptured, err)
		}
	}
	a.responseNotCaptured = true
	return a
}
