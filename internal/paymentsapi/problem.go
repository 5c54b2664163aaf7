package paymentsapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/idemkit/idemkit/internal/wire"
)

// Problem type slugs of this example, on top of the server package's. The
// type URI is wire.ProblemTypeBase + slug.
const (
	problemInvalidPayment = "invalid-payment"
	problemShuttingDown   = "shutting-down"
	problemInternal       = "internal-error"
)

// writeProblem answers with an RFC 9457 application/problem+json body.
// retryAfter, if positive, is sent as Retry-After in seconds.
func writeProblem(w http.ResponseWriter, status int, slug, title, detail string, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{wire.ProblemTypeBase + slug, title, status, detail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
