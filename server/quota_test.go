package server_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// One principal cannot fill the store: over its key quota a new key gets
// 429 quota-exceeded with Retry-After before anything is stored, while its
// existing keys still replay and other principals are unaffected.
func TestQuota_PrincipalKeysBounded(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.MaxKeysPerPrincipal = 3 })
		for i := range 3 {
			require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "mallory", keys: []string{"k" + strconv.Itoa(i)}, body: mwBody}).Status)
		}
		res := b.do(t, mwReq{principal: "mallory", keys: []string{"k3"}, body: mwBody})
		res.requireProblem(t, http.StatusTooManyRequests, wire.ProblemQuotaExceeded)
		retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.Greater(t, retry, 86000, "until the oldest record leaves the 24 h window")
		require.Equal(t, 3, b.count(t, mwCountRecords), "nothing stored for the refused key")

		again := b.do(t, mwReq{principal: "mallory", keys: []string{"k0"}, body: mwBody})
		require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed), "an existing key still replays")
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "alice", keys: []string{"k3"}, body: mwBody}).Status)
		require.EqualValues(t, 4, b.runs.Load())
	})
}

func TestQuota_PrincipalStoredBytesBounded(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeLease, func(c *server.Config) { c.MaxStoredBytesPerPrincipal = 600 })
		big := `{"pad":"` + strings.Repeat("x", 300) + `"}`
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "mallory", keys: []string{"a"}, body: big}).Status)
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "mallory", keys: []string{"b"}, body: big}).Status)
		b.do(t, mwReq{principal: "mallory", keys: []string{"c"}, body: big}).requireProblem(t, http.StatusTooManyRequests, wire.ProblemQuotaExceeded)
		require.EqualValues(t, 2, b.runs.Load())
	})
}

// A route's own body limit bounds what the middleware reads and
// fingerprints, below the global limit.
func TestLimitBody_RouteLimitBoundsFingerprint(t *testing.T) {
	t.Parallel()
	b := mwSetup(t, mwSQLite, server.ModeLease, nil)
	mux := http.NewServeMux()
	mux.Handle("POST /small", b.mw.Wrap(server.LimitBody(http.HandlerFunc(b.payments), 64)))
	mux.Handle("POST /named", server.LimitBody(b.mw.Wrap(server.Operation(http.HandlerFunc(b.payments), "named")), 64))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b.srv = srv
	for _, path := range []string{"/small", "/named"} {
		b.do(t, mwReq{path: path, principal: "alice", keys: []string{"k" + path}, body: strings.Repeat(" ", 65) + "{}"}).
			requireProblem(t, http.StatusRequestEntityTooLarge, wire.ProblemBodyTooLarge)
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{path: path, principal: "alice", keys: []string{"k" + path}, body: "{}"}).Status)
	}
	require.Equal(t, "named", b.eventsCopy()[3].Scope.Endpoint, "Operation and LimitBody compose")
	require.Zero(t, b.count(t, "SELECT count(*) FROM idempotency_keys WHERE key = 'k/small' AND state != 'completed'"))
}

func TestNew_QuotasNeedPrincipalUsage(t *testing.T) {
	t.Parallel()
	s := mwNewStore(t, mwSQLite)
	_, err := server.New(struct{ server.Store }{s.store}, &server.Config{PrincipalFunc: mwPrincipal, MaxKeysPerPrincipal: 1})
	require.ErrorContains(t, err, "PrincipalUsage")
}

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
