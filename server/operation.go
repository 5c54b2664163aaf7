package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"
)

// maxScopePartBytes bounds the principal and the endpoint (operation name)
// of a scope, in bytes.
const maxScopePartBytes = 512

// Operation returns h, naming the operation it performs: keys sent to it are
// scoped to (principal, name, key), independent of the same key on other
// operations. Without it a key belongs to the principal (endpoint "*"), and
// the same key on another operation is a 422.
//
// Name operations explicitly and keep the names stable (for example
// "orders.pay"); never derive them from route patterns, which change with a
// refactor or a router upgrade while keys are still inside their window.
// The name must reach the middleware before it claims the key, so give it
// to the handler the middleware wraps, or put it around the middleware:
//
//	mux.Handle("POST /v1/orders/{id}/pay", m.Wrap(server.Operation(pay, "orders.pay")))
//	payOp := func(h http.Handler) http.Handler { return server.Operation(h, "orders.pay") }
//	r.With(payOp, m.Wrap).Post("/v1/orders/{id}/pay", pay) // chi
//
// (A middleware installed with chi's r.Use runs before routing; operation
// names given per route with r.With after it never reach it.)
//
// Operation panics if name is empty, "*", longer than maxScopePartBytes, not
// valid UTF-8 or has control characters: it is a programming error, caught
// at registration like an invalid http.ServeMux pattern.
func Operation(h http.Handler, name string) http.Handler {
	if err := validOperationName(name); err != nil {
		panic(fmt.Sprintf("idemkit/server: Operation: %v", err))
	}
	return withRouteOptions(h, routeOptions{name: name})
}

// LimitBody returns h, declaring that its route accepts request bodies of
// at most n bytes: the middleware reads and fingerprints at most
// min(n, Config.MaxFingerprintBytes) bytes of a request to it and answers a
// larger one with 413 body-too-large before anything is claimed or stored,
// so the fingerprint never costs more than the route would accept. Like
// Operation, give it to the handler the middleware wraps, or put it around
// the middleware. It panics if n is not positive.
func LimitBody(h http.Handler, n int64) http.Handler {
	if n <= 0 {
		panic(fmt.Sprintf("idemkit/server: LimitBody: limit must be positive, got %d", n))
	}
	return withRouteOptions(h, routeOptions{maxBody: n})
}

// routeOptions are what Operation and LimitBody declare about a route.
type routeOptions struct {
	name    string // operation name; "" for none
	maxBody int64  // body limit; 0 for none
}

// merge returns o with the fields set in inner taking precedence (the
// declaration nearer the handler wins).
func (o routeOptions) merge(inner routeOptions) routeOptions {
	if inner.name != "" {
		o.name = inner.name
	}
	if inner.maxBody > 0 {
		o.maxBody = inner.maxBody
	}
	return o
}

// routeHandler carries route options: the Middleware reads them when it
// wraps the handler directly, and from the request context when they wrap
// the Middleware.
type routeHandler struct {
	opts routeOptions
	next http.Handler
}

func withRouteOptions(h http.Handler, opts routeOptions) http.Handler {
	if inner, ok := h.(*routeHandler); ok {
		return &routeHandler{opts: opts.merge(inner.opts), next: inner.next}
	}
	return &routeHandler{opts: opts, next: h}
}

func (o *routeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	opts := o.opts
	if outer, ok := r.Context().Value(ctxKeyRoute).(routeOptions); ok {
		opts = outer.merge(opts)
	}
	o.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKeyRoute, opts)))
}

func validOperationName(name string) error {
	if name == endpointAny {
		return fmt.Errorf("operation name %q is reserved", name)
	}
	return validScopePart("operation name", name)
}

// validScopePart checks a principal or an endpoint before it reaches a
// store: non-empty, at most maxScopePartBytes, valid UTF-8 and no control
// characters (PostgreSQL text cannot hold NUL). It rejects rather than
// cleans: two distinct principals must never become one scope.
func validScopePart(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > maxScopePartBytes:
		return fmt.Errorf("%s is longer than %d bytes", what, maxScopePartBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", what)
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s contains a control character", what)
	}
	return nil
}
