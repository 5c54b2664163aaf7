package server

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Mode selects how the middleware holds a claim while the handler runs.
type Mode int

const (
	// ModeLease commits an in-progress claim with a lease before the handler
	// runs, extends the lease while it runs and completes it with a
	// compare-and-set on the fencing token. Use it when the effect lives
	// outside the idempotency store's database (a payment processor, an
	// email); forward Scope.DownstreamKey() downstream (see ScopeFromContext).
	ModeLease Mode = iota
	// ModeTransactional claims the key, runs the handler and stores the
	// response in one database transaction, which the handler writes its
	// effect on (see pgstore.Tx and sqlitestore.Tx). A rollback, a 5xx, a panic or a crash
	// leaves neither claim nor effect behind.
	ModeTransactional
)

// String returns "lease" or "transactional".
func (m Mode) String() string {
	switch m {
	case ModeLease:
		return "lease"
	case ModeTransactional:
		return "transactional"
	default:
		return fmt.Sprintf("Mode(%d)", int(m))
	}
}

// PrincipalFunc returns the identity that scopes a request's keys: an account,
// a tenant, an API-key id. It must never return the same principal for two
// parties that must not see each other's responses. An error answers the
// request with 401 and the problem type unauthenticated.
type PrincipalFunc func(r *http.Request) (string, error)

// Defaults of Config.
const (
	windowDefault                 = 24 * time.Hour
	leaseDurationDefault          = 30 * time.Second
	lockTimeoutDefault            = 3 * time.Second
	maxFingerprintBytesDefault    = 1 << 20
	maxResponseBytesDefault       = 1 << 20
	storeTimeoutDefault           = 5 * time.Second
	maxWaitingDefault             = 256
	maxWaitingPerPrincipalDefault = 8
)

// replayHeadersDefault is the default Config.ReplayHeaders.
var replayHeadersDefault = []string{
	"Content-Type", "Content-Language", "Content-Encoding", "Content-Disposition",
	"Location", "Link", "ETag", "Last-Modified",
}

// Config configures a Middleware. The zero value is not valid: PrincipalFunc
// is required.
type Config struct {
	// PrincipalFunc identifies who sent a request. Keys are scoped to it, so
	// two principals never share a record; an empty principal is treated
	// like an error (401). It is required: New returns an error naming this
	// field without it. Defaults to nil, which New rejects.
	PrincipalFunc PrincipalFunc

	// Mode selects lease or transactional claims. Defaults to ModeLease.
	Mode Mode

	// Window is how long a key is remembered after its first use: a retry
	// within it is replayed, one after it runs as a new request. It is
	// published on every keyed response in the Idempotency-Window header, in
	// whole seconds. Defaults to 24h.
	Window time.Duration

	// LeaseDuration bounds an in-progress claim in lease mode: if the
	// process dies, a retry after the lease ends takes the claim over. The
	// middleware extends the lease every LeaseDuration/3 while the handler
	// runs. Defaults to 30s.
	LeaseDuration time.Duration

	// LockTimeout is how long a claim in transactional mode waits on a
	// concurrent uncommitted claim of the same key before answering 409.
	// Defaults to 3s.
	LockTimeout time.Duration

	// StoreTimeout bounds every call the middleware makes to the store
	// (claim, read, completion, release, lease extension, commit): a
	// database path that stops answering fails the call after it instead of
	// hanging the request. Lease extensions are also bounded by a third of
	// LeaseDuration. Defaults to 5s.
	StoreTimeout time.Duration

	// AllowMissingKey passes requests without an Idempotency-Key straight
	// to the handler instead of answering 400. Defaults to false.
	AllowMissingKey bool

	// EndpointFunc, if set, returns an explicit, stable operation name
	// such as "orders.pay" that becomes the endpoint part of every scope:
	// two requests with the same principal and key but different endpoints
	// are independent. It must not derive the name from the route pattern's
	// text or the path: a renamed parameter, a moved middleware or a router
	// upgrade would then move keys still inside the window to a new scope,
	// and their retries would run again. An empty result means no endpoint. A name given per route with Operation takes precedence.
	// Defaults to nil: the scope is (principal, "*", key) unless the
	// route names its operation.
	EndpointFunc func(r *http.Request) string

	// LegacyEndpointFunc, if set, names the endpoint under which an older
	// deployment stored records (for idemkit's former default, the
	// method and the route pattern: see the README). A request whose scope has no live record is first answered
	// from a live record under (principal, LegacyEndpointFunc(r), key), if
	// there is one: a replay, a 409 or a 422, never a second run. Set it for
	// one window after upgrading, then remove it. For idemkit's former
	// default (METHOD pattern) use LegacyPatternEndpoints with the old
	// route patterns, never r.Pattern: a route renamed in the same deploy
	// would miss its old records. Defaults to nil.
	LegacyEndpointFunc func(r *http.Request) string

	// MaxFingerprintBytes is the largest request body the middleware reads
	// to fingerprint; a larger body is answered with 413. Defaults to 1 MiB.
	MaxFingerprintBytes int64

	// MaxKeysPerPrincipal bounds the live keys (records inside the window)
	// one principal may hold. A request with a new key from a principal at
	// the bound is answered 429 quota-exceeded with Retry-After, its claim
	// freed before the handler runs; a key that exists is never refused: a
	// retry of one still running gets 409, of a completed one its replay.
	// The check reads the principal's rows before each key.
	//
	// The bound under a burst of concurrent new keys: on one replica it is
	// exact (lease mode) or never exceeded (transactional mode, where a key
	// whose commit races the check may be refused for a moment with
	// Retry-After: 1). Across R replicas a burst may exceed it by at most
	// R-1 keys in lease mode (each replica checks and claims one new key of
	// a principal at a time), and in transactional mode by the new keys the
	// other R-1 replicas have in flight at that moment, since their claims
	// are not visible until they commit.
	// The store must have the method PrincipalUsage (as pgstore.Store and
	// sqlitestore.Store do). Defaults to 0: no bound.
	MaxKeysPerPrincipal int64

	// MaxStoredBytesPerPrincipal bounds the stored response bytes (bodies
	// and headers) of one principal's live records, like
	// MaxKeysPerPrincipal. Defaults to 0: no bound.
	MaxStoredBytesPerPrincipal int64

	// MaxResponseBytes is the largest response body stored for replay. A
	// larger body is sent to the first caller but not stored; a replay then
	// sends the status and headers, an empty body and
	// Idempotent-Response-Omitted: true. Defaults to 1 MiB.
	MaxResponseBytes int

	// ReplayHeaders lists the response headers stored and replayed.
	// Set-Cookie, Authorization, Proxy-Authorization, hop-by-hop headers,
	// Content-Length and idemkit's own headers are never stored, even if
	// listed. Defaults to Content-Type, Content-Language,
	// Content-Encoding, Content-Disposition, Location, Link, ETag and
	// Last-Modified.
	ReplayHeaders []string

	// AuthorizeReplayFunc, if set, is called before every replay: a
	// completed record about to be served to a duplicate, whatever the path
	// (a replay after waiting, a legacy record, a response-not-captured
	// problem included). It gets the request, so the principal's current
	// authentication context is at hand, and the Replay (scope, operation,
	// stored status). Returning an error refuses the replay: the request is
	// answered 403 with the problem type replay-forbidden and never the
	// stored body, and its Event has OutcomeReplayRefused and Err wrapping
	// the error. The stored response was authorized when it was computed;
	// the caller's permissions may have changed since (a revoked account, a
	// token that lost a scope), so an API whose receipts are sensitive
	// checks again here.
	//
	// Mount authentication before (outside) the middleware, so that r
	// carries the principal's identity and permissions when this runs; the
	// middleware itself never authorizes. The hook does not run for a new
	// key or an in-flight duplicate (the handler authorizes those as it
	// always does). It runs on the request's goroutine and must not retain
	// r. Defaults to nil: every replay is served.
	AuthorizeReplayFunc func(r *http.Request, rp Replay) error

	// WaitInFlight, if positive, holds a duplicate that finds its key in
	// flight up to this long while the original finishes, instead of
	// answering 409 at once: once the original's response is stored the
	// duplicate gets its replay; if the original released its claim (a 5xx,
	// a panic, a rolled-back transaction) or its lease lapsed, the duplicate
	// claims the key itself and runs as a new request would; past the limit
	// it gets 409 in-flight + Retry-After, as without waiting. A waiting
	// request holds no store connection or transaction: it is woken by the
	// store (a Store that implements ChangeSubscriber, as pgstore.Store
	// does with LISTEN/NOTIFY) or polls Store.Get, every 20 ms at first,
	// doubling to 250 ms (to 1 s, as a fallback, under a ChangeSubscriber).
	// In transactional mode, whose in-flight claims are invisible until
	// they commit, the duplicate's first claim still waits up to
	// LockTimeout on the original's lock, as without waiting; its
	// transaction is then rolled back, and each poll that finds no record
	// probes the lock with a claim that waits at most 10 ms (1 s on MySQL,
	// whose lock wait counts whole seconds) and is rolled back at once,
	// telling a running original from one that rolled back. The request's
	// context ending stops the wait (503 request-canceled). Bounded by
	// MaxWaiting and MaxWaitingPerPrincipal. An http.Server WriteTimeout
	// (or a proxy's timeout) must be longer than WaitInFlight, or the
	// answer is cut off. Defaults to 0: a duplicate of an in-flight request
	// is answered 409 at once.
	WaitInFlight time.Duration

	// MaxWaiting bounds the requests of this middleware waiting at once
	// (WaitInFlight); a duplicate over it is answered 409 at once, as
	// without waiting. Defaults to 256.
	MaxWaiting int

	// MaxWaitingPerPrincipal bounds the requests of one principal waiting
	// at once (WaitInFlight), so that one caller cannot take every waiting
	// place; a duplicate over it is answered 409 at once. Defaults to 8.
	MaxWaitingPerPrincipal int

	// CorrelationIDFunc returns the correlation id of a request: stored
	// with its completed record (inside the stored headers, no schema
	// change; encrypted with them under server/sealstore) and, on every
	// replay, put in the Event (Event.OriginalRequestID), in the log line
	// and in the response header Idempotency-Original-Request-Id, so that a
	// retry names the request that did the work. An id longer than 128
	// bytes or with a byte outside letters, digits and -._~:/+=@ is
	// dropped, never stored or sent. Return "" for none. Defaults to
	// DefaultCorrelationID (the trace id of a W3C traceparent header, else
	// X-Request-Id).
	CorrelationIDFunc func(r *http.Request) string

	// LogIdentifiers logs idempotency keys and principals as they are in
	// the lines the middleware writes to Logger. Defaults to false: the
	// attributes key and principal are replaced by "sha256:" and 16 hex
	// digits of their SHA-256, the form `idemkit store inflight` prints, so
	// that one request's lines still match each other.
	LogIdentifiers bool

	// OnEventFunc, if set, is called once for every keyed request, after
	// its response was written. It must not retain r. Package
	// server/prommetrics builds Prometheus metrics on it. Defaults to nil.
	OnEventFunc func(r *http.Request, e Event)

	// Logger receives warnings (lost leases, store errors after the
	// handler ran, panics). Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every unset (zero) field set to its
// default. It is safe to call on a nil Config. Negative values are kept, and
// New rejects them.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Window = cmp.Or(out.Window, windowDefault)
	out.LeaseDuration = cmp.Or(out.LeaseDuration, leaseDurationDefault)
	out.LockTimeout = cmp.Or(out.LockTimeout, lockTimeoutDefault)
	out.MaxFingerprintBytes = cmp.Or(out.MaxFingerprintBytes, maxFingerprintBytesDefault)
	out.MaxResponseBytes = cmp.Or(out.MaxResponseBytes, maxResponseBytesDefault)
	out.StoreTimeout = cmp.Or(out.StoreTimeout, storeTimeoutDefault)
	if out.ReplayHeaders == nil {
		out.ReplayHeaders = replayHeadersDefault
	}
	out.ReplayHeaders = append([]string(nil), out.ReplayHeaders...)
	out.Logger = cmp.Or(out.Logger, slog.Default())
	out.MaxWaiting = cmp.Or(out.MaxWaiting, maxWaitingDefault)
	out.MaxWaitingPerPrincipal = cmp.Or(out.MaxWaitingPerPrincipal, maxWaitingPerPrincipalDefault)
	if out.CorrelationIDFunc == nil {
		out.CorrelationIDFunc = DefaultCorrelationID
	}
	return &out
}

func (c *Config) validate() error {
	var errs []error
	if c.PrincipalFunc == nil {
		errs = append(errs, errors.New("Config.PrincipalFunc is required: keys must be scoped to who sent them"))
	}
	if c.Mode != ModeLease && c.Mode != ModeTransactional {
		errs = append(errs, fmt.Errorf("Config.Mode: unknown mode %d", int(c.Mode)))
	}
	if c.Window < time.Second {
		errs = append(errs, fmt.Errorf("Config.Window must be at least 1s, got %v", c.Window))
	}
	if c.LeaseDuration < 3*time.Millisecond {
		errs = append(errs, fmt.Errorf("Config.LeaseDuration too short: %v", c.LeaseDuration))
	}
	if c.LeaseDuration >= c.Window {
		errs = append(errs, fmt.Errorf("Config.LeaseDuration (%v) must be shorter than Config.Window (%v)", c.LeaseDuration, c.Window))
	}
	if c.LockTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("Config.LockTimeout must be at least 1ms, got %v", c.LockTimeout))
	}
	if c.StoreTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("Config.StoreTimeout must be at least 1ms, got %v", c.StoreTimeout))
	}
	if c.MaxKeysPerPrincipal < 0 || c.MaxStoredBytesPerPrincipal < 0 {
		errs = append(errs, errors.New("Config.MaxKeysPerPrincipal and Config.MaxStoredBytesPerPrincipal must not be negative"))
	}
	if c.MaxFingerprintBytes < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxFingerprintBytes must not be negative, got %d", c.MaxFingerprintBytes))
	}
	if c.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxResponseBytes must not be negative, got %d", c.MaxResponseBytes))
	}
	if c.WaitInFlight < 0 {
		errs = append(errs, fmt.Errorf("Config.WaitInFlight must not be negative, got %v", c.WaitInFlight))
	}
	if c.MaxWaiting < 0 || c.MaxWaitingPerPrincipal < 0 {
		errs = append(errs, errors.New("Config.MaxWaiting and Config.MaxWaitingPerPrincipal must not be negative"))
	}
	for _, h := range c.ReplayHeaders {
		if h == "" || strings.ContainsAny(h, " \t\r\n:") {
			errs = append(errs, fmt.Errorf("Config.ReplayHeaders: invalid header name %q", h))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("idemkit/server: invalid config: %w", errors.Join(errs...))
	}
	return nil
}
