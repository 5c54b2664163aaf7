package wire

import "strings"

// ProblemTypeBase is the prefix of every problem type URI (RFC 9457); the
// slug follows it, e.g. ProblemTypeBase + "key-reused". docs/problems.md has
// one section per slug.
const ProblemTypeBase = "https://github.com/idemkit/idemkit/blob/main/docs/problems.md#"

// Problem type slugs. The problem type URI is ProblemType(slug).
const (
	ProblemInFlight         = "in-flight"
	ProblemKeyReused        = "key-reused"
	ProblemKeyMissing       = "key-missing"
	ProblemKeyInvalid       = "key-invalid"
	ProblemBodyTooLarge     = "body-too-large"
	ProblemBodyUnreadable   = "body-unreadable"
	ProblemUnauthenticated  = "unauthenticated"
	ProblemStoreUnavailable = "store-unavailable"
	ProblemStoreBusy        = "store-busy"
	ProblemHandlerPanic     = "handler-panic"
	ProblemCanceled         = "request-canceled"
	ProblemOutcomeUnknown   = "outcome-unknown"
	ProblemPrincipalInvalid = "principal-invalid"
	ProblemEndpointInvalid  = "endpoint-invalid"
	ProblemQuotaExceeded    = "quota-exceeded"
	ProblemNotCaptured      = "response-not-captured"
	ProblemReplayForbidden  = "replay-forbidden"
)

// problemTitles are the fixed titles of each slug.
var problemTitles = map[string]string{
	ProblemInFlight:         "A request with this Idempotency-Key is still in progress",
	ProblemKeyReused:        "Idempotency-Key reused with a different request",
	ProblemKeyMissing:       "Idempotency-Key is missing",
	ProblemKeyInvalid:       "Idempotency-Key is invalid",
	ProblemBodyTooLarge:     "Request body too large",
	ProblemBodyUnreadable:   "Request body could not be read",
	ProblemUnauthenticated:  "Unauthenticated",
	ProblemStoreUnavailable: "Idempotency store unavailable",
	ProblemStoreBusy:        "Idempotency store busy",
	ProblemHandlerPanic:     "Internal server error",
	ProblemCanceled:         "Request canceled before it was processed",
	ProblemOutcomeUnknown:   "Outcome unknown",
	ProblemPrincipalInvalid: "Principal cannot scope an Idempotency-Key",
	ProblemEndpointInvalid:  "Operation name cannot scope an Idempotency-Key",
	ProblemQuotaExceeded:    "Idempotency quota exceeded",
	ProblemNotCaptured:      "The operation ran once; its response was not captured",
	ProblemReplayForbidden:  "Not allowed to read this Idempotency-Key's stored response",
}

// ProblemType returns the problem type URI of slug: ProblemTypeBase + slug.
func ProblemType(slug string) string { return ProblemTypeBase + slug }

// ProblemTitle returns the fixed title of slug, or "" if slug is not one of
// the Problem* constants.
func ProblemTitle(slug string) string { return problemTitles[slug] }

// ProblemSlug returns the slug of typeURI, the inverse of ProblemType. ok is
// false if typeURI does not start with ProblemTypeBase or its slug is not one
// of the Problem* constants.
func ProblemSlug(typeURI string) (slug string, ok bool) {
	slug, found := strings.CutPrefix(typeURI, ProblemTypeBase)
	if !found {
		return "", false
	}
	if _, known := problemTitles[slug]; !known {
		return "", false
	}
	return slug, true
}
