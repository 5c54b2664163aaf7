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

func TestOperation_InvalidNamePanics(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "*", "a\x00b", "\xff"} {
		require.Panics(t, func() { server.Operation(http.NotFoundHandler(), name) }, "name %q", name)
	}
}
