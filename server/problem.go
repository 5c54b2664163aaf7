package server

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemTypeBase is the prefix of every problem type URI; the slug follows
// it, e.g. ProblemTypeBase + "key-reused". docs/problems.md has one section
// per slug.
const ProblemTypeBase = "https://github.com/idemkit/idemkit/blob/main/docs/problems.md#"

// Problem type slugs. The problem type URI is ProblemTypeBase + slug.
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
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

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
}

// writeProblem answers with an application/problem+json body. retryAfter, if
// positive, is sent as Retry-After in seconds. detail must never carry
// anything about another principal's records.
func writeProblem(w http.ResponseWriter, status int, slug, detail string, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	body, _ := json.Marshal(problem{
		Type:   ProblemTypeBase + slug,
		Title:  problemTitles[slug],
		Status: status,
		Detail: detail,
	})
	body = append(body, '\n')
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
