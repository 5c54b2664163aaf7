package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// A Redis restarted without persistence forgets every claim, and the
// tokens of the scope start again at 1. The holder of the forgotten claim
// must not complete over the new claim: another store's new claim has the
// same token but another claim id, and the same store's new claim gets a
// higher token.
func TestStore_RestartWithoutPersistenceFencesTheOldHolder(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	srv := testredis.Start(t)
	a, err := redisstore.New(srv.Client(t), nil)
	require.NoError(t, err)
	b, err := redisstore.New(srv.Client(t), nil)
	require.NoError(t, err)
	resp := func(body string) *server.StoredResponse {
		return &server.StoredResponse{Status: http.StatusCreated, Body: []byte(body)}
	}

	t.Run("another store", func(t *testing.T) {
		req := claimAt(time.Now(), "other-store", time.Minute, time.Hour)
		old, err := a.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, old.Acquired)

		srv.Restart(t)
		_, err = b.Get(ctx, req.Scope, time.Now())
		require.ErrorIs(t, err, server.ErrRecordNotFound, "the claim is gone with the restart")
		cur, err := b.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, cur.Acquired, "a retry claims again: the handler runs again")
		require.Equal(t, old.Token, cur.Token, "the token restarted")

		require.ErrorIs(t, a.ExtendLease(ctx, req.Scope, old.Token, time.Now(), time.Hour), server.ErrLeaseLost)
		require.ErrorIs(t, a.Complete(ctx, req.Scope, old.Token, time.Now(), resp("old")), server.ErrLeaseLost)
		require.NoError(t, b.Complete(ctx, req.Scope, cur.Token, time.Now(), resp("new")))
		rec, err := b.Get(ctx, req.Scope, time.Now())
		require.NoError(t, err)
		require.Equal(t, "new", string(rec.Response.Body))
	})

	t.Run("same store", func(t *testing.T) {
		req := claimAt(time.Now(), "same-store", time.Minute, time.Hour)
		old, err := a.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, old.Acquired)

		srv.Restart(t)
		cur, err := a.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, cur.Acquired)
		require.Greater(t, cur.Token, old.Token, "a store's own tokens for a scope keep increasing")

		require.ErrorIs(t, a.Release(ctx, req.Scope, old.Token), server.ErrLeaseLost)
		require.ErrorIs(t, a.Complete(ctx, req.Scope, old.Token, time.Now(), resp("old")), server.ErrLeaseLost)
		require.NoError(t, a.Complete(ctx, req.Scope, cur.Token, time.Now(), resp("new")))
		rec, err := a.Get(ctx, req.Scope, time.Now())
		require.NoError(t, err)
		require.Equal(t, "new", string(rec.Response.Body))
		require.Zero(t, redisstore.HeldClaims(a))
	})
}

// Through the middleware: a request in flight when Redis restarts without
// persistence loses its claim; the client's retry, on another replica of
// the service, runs the handler again
// (two effects: the downstream must deduplicate by Scope.DownstreamKey),
// and the first run's late completion does not replace the retry's stored
// response.
func TestMiddleware_RedisRestartRunsHandlerAgain(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	srv := testredis.Start(t)
	// Two replicas of the service, each with its own store, as behind a load
	// balancer: the first attempt reaches one, the retry the other.
	var replicas []*httptest.Server
	newReplica := func(h http.Handler) {
		store, err := redisstore.New(srv.Client(t), nil)
		require.NoError(t, err)
		m, err := server.New(store, &server.Config{PrincipalFunc: func(*http.Request) (string, error) { return "acct", nil }})
		require.NoError(t, err)
		ts := httptest.NewServer(m.Wrap(h))
		t.Cleanup(ts.Close)
		replicas = append(replicas, ts)
	}

	var runs atomic.Int64
	in := []chan struct{}{make(chan struct{}), make(chan struct{})}
	release := []chan struct{}{make(chan struct{}), make(chan struct{})}
	keys := make(chan string, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		sc, _ := server.ScopeFromContext(r.Context())
		keys <- sc.DownstreamKey()
		if n <= 2 {
			close(in[n-1])
			select {
			case <-release[n-1]:
			case <-ctx.Done():
			}
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
	newReplica(h)
	newReplica(h)
	post := func(ts *httptest.Server) (*http.Response, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/payments", strings.NewReader(`{"amount":1}`))
		if err != nil {
			return nil, "", err
		}
		req.Header.Set("Idempotency-Key", "restart-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := ts.Client().Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, string(body), err
	}

	bodies := []chan string{make(chan string, 1), make(chan string, 1)}
	send := func(i int) {
		_, body, err := post(replicas[i])
		if err != nil {
			body = err.Error()
		}
		bodies[i] <- body
	}
	go send(0)
	<-in[0]
	srv.Restart(t)

	// The retry finds no claim and runs the handler again, while the first
	// run is still going.
	go send(1)
	<-in[1]
	require.Equal(t, <-keys, <-keys, "both runs forward the same downstream key")
	// The first run finishes first: its completion (same token, another
	// claim id) must be refused.
	close(release[0])
	require.Equal(t, "run 1", <-bodies[0], "the first client gets its own run's response")
	close(release[1])
	require.Equal(t, "run 2", <-bodies[1])

	resp, body, err := post(replicas[0])
	require.NoError(t, err)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "run 2", body, "the first run's late completion must not replace the claim of the second")
	require.Equal(t, int64(2), runs.Load())
}

// A handler whose claim Redis forgot learns it at the next heartbeat: its
// context is canceled with cause server.ErrLeaseLost (the extension is
// refused, the claim id being gone), so it can stop acting on the claim.
func TestMiddleware_RedisRestartCancelsTheHandler(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	srv := testredis.Start(t)
	store, err := redisstore.New(srv.Client(t), nil)
	require.NoError(t, err)
	m, err := server.New(store, &server.Config{
		PrincipalFunc: func(*http.Request) (string, error) { return "acct", nil },
		LeaseDuration: 600 * time.Millisecond, // a heartbeat every 200ms
	})
	require.NoError(t, err)
	in, cause := make(chan struct{}), make(chan error, 1)
	ts := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(in)
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-ctx.Done():
			cause <- ctx.Err()
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})))
	defer ts.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/payments", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "forgotten")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := ts.Client().Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-in
	srv.Restart(t)
	require.ErrorIs(t, <-cause, server.ErrLeaseLost)
	<-done
}
