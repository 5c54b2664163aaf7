package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// A Replay is a completed record about to be served to a duplicate, as
// Config.AuthorizeReplayFunc sees it.
type Replay struct {
	// Scope is the record's scope: Principal (the caller, as PrincipalFunc
	// named it), Endpoint (the operation name, "*" when the route names
	// none) and Key.
	Scope
	// Status is the stored response's status.
	Status int
	// CreatedAt is when the original request claimed the key.
	CreatedAt time.Time
	// OriginalRequestID is the correlation id of the original request (see
	// Config.CorrelationIDFunc), or "".
	OriginalRequestID string
}

// errReplayForbidden wraps the error of Config.AuthorizeReplayFunc in the
// Event.Err of a refused replay. HTTP: 403 replay-forbidden.
var errReplayForbidden = errors.New("idemkit/server: replay refused by Config.AuthorizeReplayFunc")

// detailReplayForbidden is the detail of a replay-forbidden problem: it
// says nothing of the stored response.
const detailReplayForbidden = "The request with this Idempotency-Key was already processed, but you are not allowed to read its stored response now. Nothing was done for this request; do not retry with the same key."

// replay sends the stored response of ex, a completed record, unless
// Config.AuthorizeReplayFunc refuses it.
func (m *Middleware) replay(w http.ResponseWriter, r *http.Request, ex *Record, tr *trace) answer {
	resp := ex.Response
	header, original := takeRequestID(resp.Header)
	if f := m.cfg.AuthorizeReplayFunc; f != nil {
		err := f(r, Replay{Scope: ex.Scope, Status: resp.Status, CreatedAt: ex.CreatedAt, OriginalRequestID: original})
		if err != nil {
			m.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "idemkit: replay refused by AuthorizeReplayFunc",
				scopeAttrs(tr.scope, slog.Int("stored_status", resp.Status), slog.String("request_id", tr.requestID),
					slog.String("original_request_id", original), slog.Any("error", err))...)
			writeProblem(w, http.StatusForbidden, wire.ProblemReplayForbidden, detailReplayForbidden, 0)
			return answer{outcome: OutcomeReplayRefused, status: http.StatusForbidden, err: fmt.Errorf("%w: %w", errReplayForbidden, err), originalRequestID: original}
		}
	}
	h := w.Header()
	for k, v := range header {
		h[k] = v
	}
	h.Set(wire.HeaderReplayed, "true")
	if original != "" {
		h.Set(wire.HeaderOriginalRequestID, original)
	}
	if resp.BodyOmitted {
		h.Set(wire.HeaderOmitted, "true")
	}
	if bodyAllowed(resp.Status) {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	// The line carries the correlation ids and the wait only when there
	// are some: logged on every replay, it then fits slog's five inline
	// attributes and allocates nothing for them.
	attrs := [7]slog.Attr{slog.String("principal", tr.scope.Principal), slog.String("endpoint", tr.scope.Endpoint),
		slog.String("key", tr.scope.Key), slog.Int("status", resp.Status)}
	n := 4
	if tr.requestID != "" {
		attrs[n], n = slog.String("request_id", tr.requestID), n+1
	}
	if original != "" {
		attrs[n], n = slog.String("original_request_id", original), n+1
	}
	if tr.waited > 0 {
		attrs[n], n = slog.Duration("waited", tr.waited), n+1
	}
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "idemkit: replayed the stored response", attrs[:n]...)
	w.WriteHeader(resp.Status)
	if bodyAllowed(resp.Status) && !resp.BodyOmitted {
		_, _ = w.Write(resp.Body)
	}
	return answer{outcome: OutcomeReplayed, status: resp.Status, originalRequestID: original}
}
