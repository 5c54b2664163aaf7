// Package fakeprovider starts fake payment APIs for tests: an httptest
// server on 127.0.0.1 that speaks one provider's idempotency dialect —
// "stripe", "adyen", "checkout" (Checkout.com), "paypal", "ietf" (the
// IETF draft) or "idemkit" (this module's server) — so that a test of a
// client's retry path runs against "Stripe" without a hand-written fake.
//
// Every POST creates a resource (a JSON object with an "id") unless it is
// a retry: a request carrying a key the caller already used within the
// window is answered as the dialect documents —
//
//   - the stored answer, with Idempotent-Replayed: true where the provider
//     marks replays (stripe, idemkit);
//   - an in-flight answer while the first request still runs: 409 (stripe:
//     code idempotency_key_in_use, no Retry-After; idemkit and ietf:
//     problem+json with Retry-After), 409 for checkout (it was 429; no
//     Retry-After: its docs say wait 30 s), 409 for paypal ("might fail the second
//     request") and adyen;
//   - a refusal when the key comes back with another request: 400
//     idempotency_error (stripe), 422 (idemkit: problem type key-reused;
//     ietf; paypal: PAYPAL_REQUEST_ID_PREVIOUSLY_USED), and, where the
//     provider documents no answer (adyen, checkout), a 422 of the fake's
//     choosing.
//
// Keys are read from the dialect's header (Cko-Idempotency-Key for
// checkout, PayPal-Request-Id for paypal, an RFC 8941 string for ietf,
// Idempotency-Key otherwise) and scoped to the caller: the Authorization
// header's value. A malformed key (empty, too long for the dialect,
// control characters, the header repeated) is a 400. A request without a
// key is a 400 for idemkit and ietf and runs without idempotency for the
// others, as they document. Which errors are stored follows the dialect
// too: stripe stores every answer, 500s included ("including 500
// errors"); checkout replays only successes; the others store 4xx, not
// 5xx.
//
// A test injects faults with [Server.DropAnswers] (run the request, then
// close the connection without answering), [Server.HoldNext] (the next
// execution stays in flight for a while) and [Server.FailNext] (answer
// the next requests with an error, running nothing), and reads
// [Server.Executions]. [Config].Broken breaks the fake on purpose, the way
// real implementations break (check-then-act, unscoped keys, no
// fingerprint...): `idemkit check` must catch each.
//
// The fakes keep everything in memory, are for tests only, and are safe
// for concurrent use.
package fakeprovider
