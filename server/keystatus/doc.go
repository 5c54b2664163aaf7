// Package keystatus answers "what became of my request with this
// Idempotency-Key?": a principal-scoped status lookup the API mounts next
// to the routes the idempotency middleware protects.
//
//	h, err := keystatus.New(store, &keystatus.Config{
//		PrincipalFunc: principal, // the middleware's own
//		Operations:    []string{"*"},
//	})
//	mux.Handle("GET /v1/idempotency-keys/{key}", h)
//
// A client whose answer was lost (a timeout, a reset connection, a process
// killed while it waited) asks it instead of guessing; package idemkit's
// Client.Reconcile and the `idemkit reconcile` command do.
//
// # Wire format
//
// GET <prefix>/idempotency-keys/{key}, optionally with ?endpoint=<operation>
// (the operation name the middleware scopes the key by: a name given with
// server.Operation, or "*" for routes that name none). It answers 200
// application/json with Cache-Control: no-store and one of:
//
//	{"key":K,"status":"in_progress","endpoint":E,"age_seconds":N,"created_at":T}
//	{"key":K,"status":"completed","endpoint":E,"response_status":201,"created_at":T,
//	 "response":{"status":201,"headers":{...},"body_base64":"...","body_omitted":false}}
//	{"key":K,"status":"unknown"}
//
// "response" is present only when Config.ShowResponseFunc allows it (by
// default only the status is shown). "unknown" means this principal has no
// live record for the key under the operations looked at: never sent, not
// yet committed (a transactional request still running), expired, released
// (the handler failed and a retry runs it afresh), or another principal's.
// Within the window, resending the request with the same key is then safe:
// the middleware replays or waits on anything still there.
//
// # Timestamps
//
// created_at (RFC 3339, UTC, whole seconds) is when the record was first
// claimed: when the original request arrived. A takeover of a lapsed lease
// (a retry, or server/recoverer) keeps it; only a key claimed anew after
// its record expired starts a new one. age_seconds (in_progress) counts
// from it too. For a completed record it is not the time of completion:
// server.Record keeps no completion time on any store, so no completed_at
// is sent, and the response was stored at some moment after created_at
// (by the original, or much later by a takeover or the recoverer).
//
// A request without a principal gets the middleware's 401 unauthenticated
// (or principal-invalid) problem; a key the middleware would refuse gets
// its 400 key-invalid problem; an endpoint the handler does not cover, or
// a key with records under more than one covered operation and no
// ?endpoint=, gets 400 endpoint-invalid; a store that cannot be read, 503
// store-unavailable (see docs/problems.md).
//
// # Nothing across principals
//
// The handler reads the store only under the caller's principal: for each
// operation it covers (or the one ?endpoint= names) exactly one Store.Get,
// whatever the answer. Another principal's record is therefore never read,
// and the answer about it is byte for byte the answer about a key never
// used, by the same code path, so neither the body nor the time it takes
// tells them apart.
//
// It works on any server.Store, sealstore.Store included (the response it
// shows is the opened one; a row that does not open is a 503, never shown).
package keystatus
