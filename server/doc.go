// Package server makes unsafe HTTP requests idempotent: a net/http
// middleware that turns "the client retried" into "nothing happened twice",
// over a PostgreSQL or SQLite store. The stores are driver packages, so that
// a program links only the database it uses: server/pgstore (pgx v5) and
// server/sqlitestore (modernc.org/sqlite, no cgo). Prometheus metrics are in
// server/prommetrics, the background deletion of expired records in
// server/sweeper, and the conformance suite for other stores in
// server/storetest.
//
// # In 30 seconds
//
//	db, err := sqlitestore.Open(ctx, "idem.db") // or pgstore.New(pool, nil)
//	store, err := sqlitestore.New(db, nil)
//	err = store.Migrate(ctx)
//	m, err := server.New(store, &server.Config{
//		PrincipalFunc: func(r *http.Request) (string, error) { return accountID(r) },
//	})
//	mux := http.NewServeMux()
//	mux.Handle("POST /payments", m.Wrap(payments)) // wrap the route, not the mux
//
// A client sends Idempotency-Key: <uuid> with a POST. The first request runs
// the handler and stores its response; every retry with the same key and the
// same request gets that response back, byte for byte, with
// Idempotent-Replayed: true, and the handler does not run again.
//
// # The contract
//
//	first request with a key          the handler's response (stored)
//	same key, same request, completed the stored status, allowlisted headers and body + Idempotent-Replayed: true
//	same key while the first runs     409 in-flight + Retry-After (the remaining lease, at least 1 s)
//	  ... with Config.WaitInFlight      held until the first's response is stored (its replay), up to the limit
//	completed, replay refused         403 replay-forbidden (Config.AuthorizeReplayFunc); nothing of the stored response
//	same key, different request       422 key-reused
//	no key                            400 key-missing (or pass through: Config.AllowMissingKey)
//	malformed key                     400 key-invalid
//	body over MaxFingerprintBytes     413 body-too-large
//	no principal                      401 unauthenticated
//	store unreachable / busy          503 store-unavailable / store-busy + Retry-After; the handler does not run
//	handler answered 5xx or panicked  the 5xx (a 500 handler-panic problem for a panic); nothing stored, the key is free
//
// Every response to a keyed request carries Idempotency-Window: the
// retention window (Config.Window, 24 h by default) in seconds. Errors are
// RFC 9457 application/problem+json with Cache-Control: no-store and a type
// URI under https://github.com/idemkit/idemkit/blob/main/docs/problems.md,
// which describes each. Safe methods
// (GET, HEAD, OPTIONS, TRACE) pass through untouched.
//
// # Scope
//
// A key is scoped to (principal, endpoint, key). The principal comes from
// [Config.PrincipalFunc] and is required: two tenants who both send the key
// "retry-1" never see, nor collide with, each other's records. By default a
// key belongs to the principal (the endpoint is "*"): reusing it
// on another operation is a 422, because the fingerprint covers the method
// and the concrete path. The scope never depends on route-pattern text, so a
// renamed route or a moved middleware keeps replaying. An API that wants a
// key to be independent per operation names its operations explicitly with
// [Operation] or [Config.EndpointFunc].
//
// # Fingerprint
//
// A retry must be the same request. The middleware hashes (SHA-256) a
// versioned canonical form of the method, the request target as the client
// sent it (r.RequestURI: path and query, before any http.StripPrefix or
// mount rewrote r.URL, so moving the middleware does not change it) and the
// body:
//
//	idemkit-fp-v2\n<METHOD>\n<request target>\n<json|raw>\n<body>
//
// Records stored with version 1 (which hashed r.URL's path, as the
// middleware saw it) keep matching by their own version.
//
// A JSON body (Content-Type application/json or +json) is canonicalised: key
// order, whitespace and number spelling do not matter, big numbers keep every
// digit. Only the hash and its version are stored, never the request.
//
// # Modes
//
// [ModeLease] (the default) is for effects outside the store's database: the
// claim commits in_progress with a lease and a fencing token before the
// handler runs, a heartbeat extends the lease every LeaseDuration/3, and the
// response is stored with a compare-and-set on the token. If the process
// dies, a retry after the lease takes the claim over and runs the handler
// again, so forward [Scope.DownstreamKey] downstream ([ScopeFromContext]).
//
// [ModeTransactional] is for effects in the same database: the claim, the
// handler's writes (on pgstore.Tx or sqlitestore.Tx) and the stored response commit in
// one transaction. A 5xx, a panic or a crash rolls all of it back and frees
// the key. With SQLite, whose single writer is held for the transaction, keep
// handlers short: concurrent transactional requests on other keys wait up to
// Config.LockTimeout and then get 503 store-busy.
//
// # Responses
//
// The handler's response is buffered and only sent once it is stored (lease
// mode) or committed (transactional mode). Flush is a no-op while buffering;
// Hijack is refused. A body larger than Config.MaxResponseBytes is sent in
// full but not stored: in lease mode the record is completed as soon as the
// body passes the cap and the rest streams through; a replay sends the
// status and headers, an empty body and Idempotent-Response-Omitted: true,
// and never runs the handler. Set-Cookie, Authorization and hop-by-hop
// headers are never stored. A handler that returns without writing anything
// after its request's context ended (the client went away) produced no
// outcome: nothing is stored, the claim is released (or rolled back), and
// the retry runs the handler.
//
// # Waiting, re-authorized replays and correlation
//
// [Config.WaitInFlight] holds a duplicate of an in-flight request until
// the original's response is stored, instead of answering 409 at once;
// waiting holds no store connection (a [ChangeSubscriber] store wakes the
// waiter, others are polled) and is bounded by [Config.MaxWaiting] and
// [Config.MaxWaitingPerPrincipal].
//
// [Config.AuthorizeReplayFunc] checks a caller again before its replay: a
// stored response was authorized when it was computed, and the caller's
// permissions may have changed since. Mount authentication before the
// middleware (the middleware wraps the handler; the authentication
// middleware wraps the middleware), so that the request carries the
// caller's identity and permissions when the hook runs.
//
// [Config.CorrelationIDFunc] names each request ([DefaultCorrelationID]:
// the traceparent trace id, else X-Request-Id); the id is stored with the
// response and every replay sends it back as
// Idempotency-Original-Request-Id, so that a retry leads to the request
// that did the work.
//
// # Observability
//
// [Config.OnEventFunc] receives one [Event] per keyed request (outcome,
// status, token, takeover, error, durations, release, lost leases, store
// errors). Package server/prommetrics builds Prometheus counters of claims,
// replays, conflicts, mismatches, releases, takeovers, lost leases and
// store errors, and a claim latency histogram, on it.
//
// The middleware's own log lines ([Config.Logger]) show an idempotency
// key and a principal only as "sha256:" and 16 hex digits of their
// SHA-256, unless [Config.LogIdentifiers] is set.
//
// # Stability
//
// The package is pre-1.0: exported names may still change. Fingerprint
// version 1 is frozen (testdata/fingerprint_golden.json); any change to the
// canonical form gets a new version.
package server
