// Package intenttest is the intent conformance suite: the client-side
// counterpart of server/storetest. Every backend that queues intents — the
// SQLite client of the root package, the River backend of package idemriver —
// runs [Run] with a small adapter ([Backend], [Queue]) and must pass every
// case, with no skips under CI=true:
//
//   - the key is minted once and every attempt of an intent carries it;
//   - the intent is durable (and its first attempt recorded) before the first
//     byte reaches the server;
//   - no attempt starts after the horizon: the first attempt plus the
//     effective window minus the margin;
//   - a window the server advertised (Idempotency-Window) is learned per host
//     and shortens the horizon of later intents to that host;
//   - a Retry-After is honoured;
//   - a replayed answer is final (succeeded for 2xx, failed otherwise);
//   - a handler's own 409 is failed, not retried;
//   - a lost answer followed by an answer that says nothing about it (a 401)
//     ends the intent outcome-unknown, never failed;
//   - the attempt budget (MaxAttemptsPerHour) holds against "Retry-After: 0";
//   - a worker killed (SIGKILL) mid-request is taken over by another process
//     with the same key, and the effect happens once;
//   - request and response bytes are preserved exactly;
//   - credentials (request headers given to Submit or added by the send hook,
//     response cookies and tokens) are never stored.
//
// The server under test is the idemkit server middleware (package server over
// server/sqlitestore) where the case is about the idempotency contract, and a
// plain httptest handler where it is about the client's reading of answers.
package intenttest
