package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// LegacyPatternEndpoints returns a Config.LegacyEndpointFunc for records
// stored under idemkit's former default endpoint, "METHOD pattern" (the
// http.ServeMux pattern without its method and host), that finds a
// request's old pattern among patterns: the ServeMux patterns of the routes
// as they were when those records were written. Reading r.Pattern instead
// names the route as it is now, so a route renamed in the same deploy
// ("/orders/{id}" to "/orders/{orderID}") would miss its old records and
// run their retries again; listing the old patterns cannot.
//
// Keep the middleware mounted where it was for that window (the patterns
// match the path as the middleware sees it). A request no pattern matches
// gets METHOD and r.URL.Path, as the former default stored for requests
// without a pattern. It panics on an invalid or duplicate pattern, as
// http.ServeMux.Handle does.
func LegacyPatternEndpoints(patterns ...string) func(r *http.Request) string {
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	return func(r *http.Request) string {
		_, p := mux.Handler(r)
		if p == "" {
			return r.Method + " " + r.URL.Path
		}
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i:], " \t") // drop the method
		}
		if i := strings.IndexByte(p, '/'); i > 0 {
			p = p[i:] // drop the host
		}
		return r.Method + " " + p
	}
}

// answeredByLegacyRecord answers r from a live record stored under the
// legacy endpoint scope (Config.LegacyEndpointFunc), if there is one, and
// reports whether it did, with its answer. A duplicate of an original in
// flight under the legacy scope waits for it under Config.WaitInFlight
// (awaitLegacy).
func (m *Middleware) answeredByLegacyRecord(w http.ResponseWriter, r *http.Request, fps requestFingerprint, tr *trace) (answer, bool) {
	scope := tr.scope
	legacy := scope
	legacy.Endpoint = m.cfg.LegacyEndpointFunc(r)
	if legacy.Endpoint == "" || legacy.Endpoint == scope.Endpoint || validScopePart("endpoint", legacy.Endpoint) != nil {
		return answer{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), m.cfg.StoreTimeout)
	defer cancel()
	rec, err := m.store.Get(ctx, legacy, m.now())
	switch {
	case errors.Is(err, ErrRecordNotFound):
		return answer{}, false
	case err != nil:
		return m.storeFailure(w, r, scope, "get_legacy", err), true
	case rec.State == StateInProgress && fps.matches(rec) && m.cfg.WaitInFlight > 0:
		return m.awaitLegacy(w, r, legacy, rec, fps, tr)
	}
	return m.answerExisting(w, r, rec, fps, tr), true
}
