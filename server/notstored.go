package server

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
)

// notStoredStatuses are the statuses below 500 that are never stored: they
// say the operation did not happen (yet), so a retry must run it rather
// than replay the refusal. 404 and 405 are also what a router answers for an
// unmatched route when the middleware wraps the router.
var notStoredStatuses = map[int]bool{
	http.StatusNotFound:         true,
	http.StatusMethodNotAllowed: true,
	http.StatusRequestTimeout:   true,
	http.StatusConflict:         true,
	http.StatusTooEarly:         true,
	http.StatusTooManyRequests:  true,
}

// notStoredMark is set by MarkNotStored.
type notStoredMark struct{ set atomic.Bool }

// MarkNotStored marks the response the handler of ctx's request is writing
// as one after which nothing happened, such as a validation failure (Stripe
// stores no result for those either): the middleware sends it but does not
// store it, and frees the key (in transactional mode the transaction rolls
// back), so a corrected retry with the same key runs the handler again. Call
// it before writing the response. It does nothing outside the middleware.
func MarkNotStored(ctx context.Context) {
	if m, ok := ctx.Value(ctxKeyNotStored).(*notStoredMark); ok {
		m.set.Store(true)
	}
}

// stores reports whether a response with status, written for r, is stored:
// every status below 500 except notStoredStatuses, unless the handler
// called MarkNotStored.
func stores(r *http.Request, status int) bool {
	if status >= 500 || notStoredStatuses[status] {
		return false
	}
	mark, ok := r.Context().Value(ctxKeyNotStored).(*notStoredMark)
	return !ok || !mark.set.Load()
}

// answeredByLegacyRecord answers r from a live record stored under the
// legacy endpoint scope (Config.LegacyEndpointFunc), if there is one, and
// reports whether it did.
func (m *Middleware) answeredByLegacyRecord(w http.ResponseWriter, r *http.Request, scope Scope, fps requestFingerprint, ev *Event) bool {
	legacy := scope
	legacy.Endpoint = m.cfg.LegacyEndpointFunc(r)
	if legacy.Endpoint == "" || legacy.Endpoint == scope.Endpoint || validScopePart("endpoint", legacy.Endpoint) != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), m.cfg.StoreTimeout)
	defer cancel()
	rec, err := m.store.Get(ctx, legacy, m.now())
	switch {
	case errors.Is(err, ErrRecordNotFound):
		return false
	case err != nil:
		m.storeFailure(w, r, ev, "get_legacy", err)
		return true
	}
	m.answerExisting(w, r, rec, fps, ev)
	return true
}
