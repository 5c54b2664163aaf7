package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

// Two lease-mode replicas on one PostgreSQL, one whose clock runs 30 s
// ahead: the database's clock decides the lease, so the fast replica gets
// 409 in-flight for a key the other one holds, and never runs the handler.
func TestPostgresLease_DatabaseClockDecidesLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testpg.Pool(t)
	store, err := pgstore.New(pool, nil) // production clock: the database's
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	var runs atomic.Int64
	inHandler := make(chan struct{})
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(inHandler)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
	replica := func(skew time.Duration) *httptest.Server {
		mw, err := server.New(store, &server.Config{
			PrincipalFunc: mwPrincipal,
			Mode:          server.ModeLease,
			LeaseDuration: 10 * time.Second,
			Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		})
		require.NoError(t, err)
		server.SetTimeNowFunc(mw, func() time.Time { return time.Now().Add(skew) })
		srv := httptest.NewServer(mw.Wrap(handler))
		t.Cleanup(srv.Close)
		return srv
	}
	slow, fast := replica(0), replica(30*time.Second)
	post := func(srv *httptest.Server) int {
		reqCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, srv.URL+"/pay", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("X-Principal", "alice")
		req.Header.Set(server.HeaderKey, "skew-1")
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}

	first := make(chan int, 1)
	go func() { first <- post(slow) }()
	<-inHandler
	require.Equal(t, http.StatusConflict, post(fast), "a replica with a fast clock must not take over a live lease")
	close(release)
	require.Equal(t, http.StatusCreated, <-first)
	require.EqualValues(t, 1, runs.Load())
}
