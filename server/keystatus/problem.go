package keystatus

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/idemkit/idemkit/internal/wire"
)

// problem is an RFC 9457 problem details object, as the middleware writes
// it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// writeProblem answers with the application/problem+json body of slug,
// byte for byte the middleware's for the same status, slug and detail.
func writeProblem(w http.ResponseWriter, status int, slug, detail string) {
	body, _ := json.Marshal(problem{Type: wire.ProblemType(slug), Title: wire.ProblemTitle(slug), Status: status, Detail: detail})
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
