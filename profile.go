package idemkit

import "github.com/idemkit/idemkit/internal/policy"

// Profile describes the idempotency dialect of one API: which header
// carries the key and how, how long the API keeps keys, how it marks a
// replayed answer, and how it says "still in progress" and "key reused".
// [Config].Profiles picks one per host; [KnownProfile] returns the shipped
// ones, which callers may copy and adjust.
//
// Whatever the profile, a response marked as a replay is the server's
// final answer (succeeded for 2xx, failed otherwise) and is never retried.
//
// Profile is an alias of the internal policy package's type, which the
// River backend shares.
type Profile = policy.Profile

// Answer matches a response: its Status and, when Code is not empty, a code
// in its JSON body, compared exactly: the "type" of an
// application/problem+json body, or the "type", "code", "errorCode",
// "error_type" or "name" of the body or of its "error" object (Stripe,
// Adyen, Checkout.com and PayPal spell their error codes so).
type Answer = policy.Answer

// KnownProfile returns a copy of a shipped profile, by name:
//
//   - "idemkit" (the default): the server package of this module.
//     Idempotency-Key sent bare; window from its Idempotency-Window header;
//     409 with problem type …/problems.md#in-flight is in progress; 422 with
//     …#key-reused is key reuse; replays marked Idempotent-Replayed (the
//     other common spellings are accepted too).
//   - "ietf": draft-ietf-httpapi-idempotency-key-header
//     (https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/;
//     read at -07; -09, November 2026, is the current revision and was not
//     reviewed for this profile): 409 means a request with the key is in
//     progress, 422 that the key was reused with another payload. The draft
//     names no replay header and no window: the common replay spellings are
//     accepted, Config.Window applies. 417 also counts as key reuse (not in
//     the draft; published middlewares answer it so). The draft defines the
//     field as an RFC 8941 sf-string ("key"), but the key is sent bare:
//     servers that store the header value verbatim (the npm middlewares
//     among them) would otherwise see a quoted key and the same key sent
//     bare by curl or another client as two keys, and charge twice. A
//     server that parses the field strictly as RFC 8941 may refuse a bare
//     key (a 400 on the first attempt): for such a server set KeyQuoted on
//     a copy.
//   - "stripe": the v1 API, https://docs.stripe.com/api/idempotent_requests and
//     https://docs.stripe.com/error-low-level#idempotency. Keys up to 255
//     characters, pruned once at least 24 hours old; replays marked
//     Idempotent-Replayed: true; a reused key is 400 with error type
//     idempotency_error; a concurrent request is 409 with code
//     idempotency_key_in_use; 429 is rate limiting (retry with backoff).
//   - "stripe-v2": Stripe's v2 API (same pages, the v2 sections): keys are
//     kept 30 days. v2 does not replay a failed request: a retry with the
//     same key "retries failed or partially failed work to completion when
//     possible and returns an updated response". The profile does what it
//     does everywhere, retrying with the same key, and takes the updated
//     response as it comes (a fresh answer, not a replay). The other
//     answers are v1's. api.stripe.com serves both: a client that calls
//     v1 and v2 endpoints should keep the "stripe" profile (the shorter
//     window is the safe one).
//   - "adyen": https://docs.adyen.com/development-resources/api-idempotency.
//     Idempotency-Key of at most 64 characters, "valid for a minimum period
//     of 31 days after first submission" (per company account, not across
//     regions); the response echoes the key but
//     the page names no replay marker, no in-progress and no reuse answer,
//     so only the common rules apply (5xx and a Retry-After are retried).
//   - "checkout": https://www.checkout.com/docs/developer-resources/api/idempotency
//     and https://www.checkout.com/docs/payments/manage-payments/retry-a-payment.
//     Cko-Idempotency-Key; keys expire after 24 hours by default; a
//     duplicate of a request still being processed gets 409 (it was 429:
//     both are retried, after at least the 30 seconds the docs advise);
//     only successfully processed requests are replayed, and a duplicate
//     of one is answered 202 with the original response (a success, so the
//     intent succeeds; it is not marked replayed, because a fresh payment
//     that is pending is answered 202 too); an unprocessed one is attempted
//     again.
//   - "paypal": https://developer.paypal.com/api/rest/reference/idempotency.
//     PayPal-Request-Id; how long the id is stored is per API ("see the
//     reference for your API"), so Config.Window applies: set Window to
//     what your API's reference says. A repeated id returns "the latest
//     status of the previous request"; simultaneous requests may fail the
//     second one; 5xx and timeouts are to be retried with the same id.
//
// It returns false for any other name.
func KnownProfile(name string) (Profile, bool) { return policy.Known(name) }
