package server_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/stretchr/testify/require"
)

// Transactional mode holds at most MaxResponseBytes of a response: once the
// body outgrows the cap the outcome (without the body) commits and the rest
// streams, instead of buffering the whole body until the end.
func TestTransactional_LargeResponseCommitsAtCap(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeTransactional, func(c *server.Config) { c.MaxResponseBytes = 1 << 10 })
		stateAfterCap := make(chan server.State, 1)
		mux := http.NewServeMux()
		mux.Handle("POST /export", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.runs.Add(1)
			if err := b.insertEffect(r, "export"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
			chunk := strings.Repeat("y", 512)
			for range 4 {
				_, _ = w.Write([]byte(chunk))
			}
			sc, _ := server.ScopeFromContext(r.Context())
			rec, err := b.store.Get(r.Context(), sc, b.clock.Now())
			if err != nil {
				stateAfterCap <- ""
			} else {
				stateAfterCap <- rec.State
			}
			for range 60 {
				_, _ = w.Write([]byte(chunk))
			}
		})))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		b.srv = srv
		res := b.do(t, mwReq{path: "/export", principal: "alice", keys: []string{"x"}, body: mwBody})
		require.Equal(t, http.StatusOK, res.Status)
		require.Len(t, res.Body, 64*512)
		require.Equal(t, server.StateCompleted, <-stateAfterCap, "committed once the body passed the cap")
		again := b.do(t, mwReq{path: "/export", principal: "alice", keys: []string{"x"}, body: mwBody})
		require.Equal(t, "true", again.Header.Get(wire.HeaderOmitted))
		require.Equal(t, 1, b.count(t, mwCountEffects))
		require.EqualValues(t, 1, b.runs.Load())
	})
}
