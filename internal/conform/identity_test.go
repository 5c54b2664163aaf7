package conform_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idemkit/internal/conform"
)

// An API that ignores keys and answers every request with the same body
// (no id, no replay marker) cannot be judged from its answers: replay,
// concurrent and scoped are "cannot tell", never a pass; what its answers
// do show (a changed body accepted, hostile keys executed) fails.
func TestRun_AnswersThatCannotBeToldApart(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	cfg := config(srv.URL, "ietf")
	cfg.ErrorBody = nil
	requireVerdicts(t, cfg, verdicts{
		conform.PropReplay:       conform.CannotTell,
		conform.PropWindow:       conform.CannotTell,
		conform.PropChangedBody:  conform.Fail,
		conform.PropConcurrent:   conform.CannotTell,
		conform.PropInFlight:     conform.CannotTell,
		conform.PropScoped:       conform.CannotTell,
		conform.PropHostileKeys:  conform.Fail,
		conform.PropErrorStorage: conform.CannotTell,
	})
}
