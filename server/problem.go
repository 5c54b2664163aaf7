package server

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/idemkit/idemkit/internal/wire"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// writeProblem answers with an application/problem+json body of the
// problem type slug (see wire.ProblemType). retryAfter, if positive, is sent
// as Retry-After in seconds. detail must never carry anything about another
// principal's records.
func writeProblem(w http.ResponseWriter, status int, slug, detail string, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	body := problemBody(status, slug, detail)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// problemBody is the JSON body of a problem of type slug.
func problemBody(status int, slug, detail string) []byte {
	body, _ := json.Marshal(problem{
		Type:   wire.ProblemType(slug),
		Title:  wire.ProblemTitle(slug),
		Status: status,
		Detail: detail,
	})
	return append(body, '\n')
}
