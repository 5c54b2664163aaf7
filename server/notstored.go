package server

import (
	"context"
	"net/http"
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

// MarkNotStored marks the response the handler of ctx's request is writing
// as one after which nothing happened, such as a validation failure (Stripe
// stores no result for those either): the middleware sends it but does not
// store it, and frees the key (in transactional mode the transaction rolls
// back), so a corrected retry with the same key runs the handler again. Call
// it before writing the response. It does nothing outside the middleware.
func MarkNotStored(ctx context.Context) {
	if v := requestValuesOf(ctx); v != nil {
		v.notStored.Store(true)
	}
}

// stores reports whether a response with status, written for r, is stored:
// every status below 500 except notStoredStatuses, unless the handler
// called MarkNotStored.
func stores(r *http.Request, status int) bool {
	if status >= 500 || notStoredStatuses[status] {
		return false
	}
	v := requestValuesOf(r.Context())
	return v == nil || !v.notStored.Load()
}
