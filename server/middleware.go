package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/internal/wire"
)

// The middleware's files depend one way. This file is the dispatcher: it
// checks a keyed request and hands it to a mode (lease.go, tx.go), which
// claims the scope, runs the handler under the held claim (held.go, with the
// response captured by recorder.go) or waits for an in-flight original
// (wait.go), and returns an answer. The modes and the dispatcher build on
// small helpers that call neither back: answers (answer.go, replay.go,
// problem.go), claims (claim.go), quotas (quota.go), the legacy lookup
// (legacy.go), MarkNotStored (notstored.go). The Event is built once, from
// the answer and the request's trace (eventOf), when the request is done.

// Middleware makes unsafe requests idempotent: it claims each request's
// (principal, endpoint, key) scope in a Store, runs the handler once, stores
// its response and replays it to every retry within the window.
type Middleware struct {
	store         Store
	cfg           *Config
	window        string
	replayHeaders map[string]bool
	timeNowFunc   func() time.Time
	durations     durations
	waiting       waiters
	usage         usageReporter // set when quotas are on
	quotas        quotaGates
}

// New returns a Middleware over store, configured by cfg with defaults
// filled in (see Config.WithDefaults). Config.PrincipalFunc is required, so a
// nil cfg is an error naming it.
func New(store Store, cfg *Config) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("idemkit/server: New: store is nil")
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	var usage usageReporter
	if c.MaxKeysPerPrincipal > 0 || c.MaxStoredBytesPerPrincipal > 0 {
		u, ok := store.(usageReporter)
		if !ok {
			return nil, fmt.Errorf("idemkit/server: invalid config: per-principal quotas need a store with the method PrincipalUsage(ctx context.Context, principal string, now time.Time) (server.PrincipalUsage, error); %T has none", store)
		}
		usage = u
	}
	if !c.LogIdentifiers {
		c.Logger = slog.New(redact.Handler(c.Logger.Handler(), "key", "principal"))
	}
	allowed := make(map[string]bool, len(c.ReplayHeaders))
	for _, h := range c.ReplayHeaders {
		h = http.CanonicalHeaderKey(h)
		if !neverStored[h] && !slices.Contains(neverStoredCorrelation, h) {
			allowed[h] = true
		}
	}
	return &Middleware{
		store:         store,
		cfg:           c,
		window:        strconv.FormatInt(int64(c.Window/time.Second), 10),
		replayHeaders: allowed,
		timeNowFunc:   time.Now,
		usage:         usage,
	}, nil
}

// neverStored are headers never stored for replay, whatever
// Config.ReplayHeaders says.
var neverStored = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Proxy-Authorization": true, "Proxy-Authenticate": true,
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
	wire.HeaderReplayed: true, wire.HeaderOmitted: true, wire.HeaderWindow: true, "Retry-After": true,
}

// Wrap returns next protected by m. Requests with a safe method (GET, HEAD,
// OPTIONS, TRACE) pass through untouched. Wrap the handler registered on an
// http.ServeMux, not the mux, so that the default endpoint sees r.Pattern.
//
// Wrapping an *http.ServeMux is fine too: a request no route of the mux
// matches (its 404 or 405) is passed to the mux without a claim. Behind
// other routers, the router's 404 or 405 is claimed but never stored.
//
// The scope's endpoint is the operation name of next when next comes from
// Operation, or of an Operation wrapped around the middleware, or else
// Config.EndpointFunc's; without any, keys belong to the principal.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	var opts routeOptions
	if o, ok := next.(*routeHandler); ok {
		opts = o.opts
	}
	mux, _ := next.(*http.ServeMux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
			next.ServeHTTP(w, r)
			return
		}
		if mux != nil {
			if _, pattern := mux.Handler(r); pattern == "" {
				// No route matches: the mux answers 404 or 405 (or
				// redirects); nothing to claim or store.
				next.ServeHTTP(w, r)
				return
			}
		}
		if outer, ok := r.Context().Value(ctxKeyRoute).(routeOptions); ok {
			m.serve(w, r, next, outer.merge(opts))
			return
		}
		m.serve(w, r, next, opts)
	})
}

// endpoint returns the endpoint part of r's scope: the route's operation
// name, Config.EndpointFunc's name, or endpointAny.
func (m *Middleware) endpoint(r *http.Request, route routeOptions) string {
	if route.name != "" {
		return route.name
	}
	if m.cfg.EndpointFunc != nil {
		if name := m.cfg.EndpointFunc(r); name != "" {
			return name
		}
	}
	return endpointAny
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, route routeOptions) {
	start := time.Now()
	key, keyErr := wire.ParseKey(r.Header.Values(HeaderKey))
	if keyErr != nil && errors.Is(keyErr, errKeyMissing) && m.cfg.AllowMissingKey {
		next.ServeHTTP(w, r) // not a keyed request: no event
		return
	}
	w.Header().Set(wire.HeaderWindow, m.window)
	tr := &trace{requestID: m.correlationID(r)}
	var a answer
	defer func() {
		// Runs on every return, and on a panic of a callback (then with
		// what the trace holds so far).
		if m.cfg.OnEventFunc != nil {
			m.cfg.OnEventFunc(r, eventOf(tr, a, time.Since(start)))
		}
	}()
	a = m.dispatch(w, r, next, route, key, keyErr, tr)
	if a.abort {
		// Once the event is out: net/http aborts the response.
		panic(http.ErrAbortHandler)
	}
}

// dispatch checks a keyed request, claims its scope in the configured mode
// and answers it, noting in tr what befell it.
func (m *Middleware) dispatch(w http.ResponseWriter, r *http.Request, next http.Handler, route routeOptions, key string, keyErr error, tr *trace) answer {
	principal, err := m.cfg.PrincipalFunc(r)
	if err == nil && principal == "" {
		err = errors.New("PrincipalFunc returned an empty principal")
	}
	if err != nil {
		return reject(w, http.StatusUnauthorized, wire.ProblemUnauthenticated, "The request has no authenticated principal, so its Idempotency-Key cannot be scoped.",
			fmt.Errorf("%w: %w", errUnauthenticated, err))
	}
	if err := validScopePart("principal", principal); err != nil {
		return reject(w, http.StatusUnauthorized, wire.ProblemPrincipalInvalid,
			fmt.Sprintf("The request's principal cannot scope an Idempotency-Key: it must be valid UTF-8 without control characters, at most %d bytes.", maxScopePartBytes),
			fmt.Errorf("%w: %w: %w", errUnauthenticated, errScopeInvalid, err))
	}
	if keyErr != nil {
		if errors.Is(keyErr, errKeyMissing) {
			return reject(w, http.StatusBadRequest, wire.ProblemKeyMissing, "This operation requires an Idempotency-Key header; mint one key per intent (a UUIDv4) and resend it on every retry.", keyErr)
		}
		detail := "The Idempotency-Key header is malformed."
		var ke *wire.KeyError
		if errors.As(keyErr, &ke) {
			detail = "The Idempotency-Key header is malformed: " + ke.Reason + "."
		}
		return reject(w, http.StatusBadRequest, wire.ProblemKeyInvalid, detail, keyErr)
	}

	limit := m.cfg.MaxFingerprintBytes
	if route.maxBody > 0 {
		limit = min(limit, route.maxBody)
	}
	body, err := readBody(r, limit)
	if err != nil {
		if errors.Is(err, errBodyTooLarge) {
			return reject(w, http.StatusRequestEntityTooLarge, wire.ProblemBodyTooLarge,
				fmt.Sprintf("The request body is larger than %d bytes, the most this route accepts.", limit), err)
		}
		return reject(w, http.StatusBadRequest, wire.ProblemBodyUnreadable, "The request body could not be read.", err)
	}
	scope := Scope{Principal: principal, Endpoint: m.endpoint(r, route), Key: key}
	if err := validScopePart("endpoint", scope.Endpoint); err != nil {
		return reject(w, http.StatusBadRequest, wire.ProblemEndpointInvalid,
			fmt.Sprintf("The operation this request was routed to has no usable name: it must be valid UTF-8 without control characters, at most %d bytes.", maxScopePartBytes),
			fmt.Errorf("%w: %w", errScopeInvalid, err))
	}
	fps := fingerprintRequest(r, body)
	tr.scope = scope

	if m.cfg.LegacyEndpointFunc != nil {
		if a, ok := m.answeredByLegacyRecord(w, r, fps, tr); ok {
			return a
		}
	}

	r = r.WithContext(withRequestValues(r.Context(), &requestValues{scope: scope}))
	r.Body = newBodyReader(body)
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }

	if m.cfg.Mode == ModeTransactional {
		return m.serveTx(w, r, next, fps, tr)
	}
	return m.serveLease(w, r, next, fps, tr)
}

// bodyReader is the request body the handler reads: the bytes the
// middleware read, fingerprinted and may store. One allocation, where
// io.NopCloser(bytes.NewReader(body)) is two.
type bodyReader struct{ bytes.Reader }

func newBodyReader(body []byte) *bodyReader {
	b := &bodyReader{}
	b.Reset(body)
	return b
}

func (*bodyReader) Close() error { return nil }

// readBody reads at most limit bytes of r.Body. It returns errBodyTooLarge if
// there are more.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: Content-Length %d > %d", errBodyTooLarge, r.ContentLength, limit)
	}
	n := limit
	if n < math.MaxInt64 {
		n++ // one byte more than the limit tells a body over it
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, n))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fmt.Errorf("%w: %w", errBodyTooLarge, err)
		}
		return nil, fmt.Errorf("idemkit/server: read request body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errBodyTooLarge, limit)
	}
	return body, nil
}

// runHandler runs next and recovers a panic.
func runHandler(next http.Handler, w http.ResponseWriter, r *http.Request) (pv any, panicked bool) {
	panicked = true
	defer func() {
		if panicked {
			pv = recover()
		}
	}()
	next.ServeHTTP(w, r)
	return nil, false
}
