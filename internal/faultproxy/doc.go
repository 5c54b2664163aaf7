// Package faultproxy is a fault-injecting HTTP reverse proxy for tests.
//
// A [Proxy] listens on 127.0.0.1 and sits between a client and an upstream
// server, also on loopback. For every request it chooses one [Action]:
//
//   - [ActionPass]: forward the request and relay the response.
//   - [ActionDropResponse]: forward the request, read the whole upstream
//     response, then close the client connection without answering. The
//     server committed; the client never hears.
//   - [ActionReset]: reset the client connection (TCP RST) before anything is
//     forwarded. The upstream never sees the request.
//   - [ActionUnavailable]: answer 503 with Retry-After without forwarding.
//   - [ActionDelay]: wait a bounded, seeded time, then forward and relay.
//   - [ActionSlowWrite]: forward, then relay the response body in small
//     chunks with short pauses between them.
//
// # Determinism
//
// The choice is a seeded random draw (math/rand/v2, PCG) against the rates in
// [Config.Rates]. Nothing else feeds the draw: no clock, no global source.
//
// In [ModeSequence] (the default) the decision for the Nth request the proxy
// accepts is a function of (Config.Seed, N) only. With one client sending one
// request at a time the run replays exactly from its seed. With concurrent
// clients the decisions are still the same sequence, but which request
// becomes the Nth depends on scheduling, so a failure may not replay.
//
// In [ModeKeyed] the decision is a function of (Config.Seed, the
// Idempotency-Key header, the attempt number for that key), where the attempt
// number counts the requests this proxy has seen with that key, from 1.
// Requests without a key are identified by "METHOD path" instead. The
// decisions then do not depend on interleaving: the third attempt with key k
// gets the same action in every run with the same seed, which is what a
// concurrent chaos test needs to replay a failure.
//
// Every request is recorded ([Proxy.Log]) with its sequence number, key,
// attempt, action and upstream status, and optionally logged to a
// [log/slog.Logger]; [Proxy.Counts] totals the actions.
//
// # Clients and connection reuse
//
// net/http's Transport transparently resends a request that failed on a
// reused keep-alive connection before any response byte arrived, when the
// request is replayable: GET, HEAD, OPTIONS, TRACE, or any request with an
// Idempotency-Key header. Against this proxy that means a drop or reset on a
// reused connection may be retried by the transport itself, and the upstream
// may see the request once more than the application sent it. Tests that
// count upstream calls exactly should disable keep-alives on the client.
//
// # Stability
//
// This package is internal to idemkit's test suites; its API may change at
// any time.
package faultproxy
