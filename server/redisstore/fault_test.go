package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

type faultBundle struct {
	ctx   context.Context
	proxy *tcpfault.Proxy
	store *redisstore.Store
}

// setupFault returns a store whose client reaches the shared Redis through
// a proxy of the test's own. The client bounds each call by its context
// (ContextTimeoutEnabled), as the middleware's StoreTimeout needs.
func setupFault(t *testing.T, maxRetries int) *faultBundle {
	t.Helper()
	opts, err := redis.ParseURL(testdb.DSN(t, testdb.Redis))
	require.NoError(t, err)
	b := &faultBundle{ctx: storetest.Context(t), proxy: tcpfault.Start(t, opts.Addr)}
	opts.Addr = b.proxy.Addr()
	opts.PoolSize = 4
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = maxRetries
	opts.DialTimeout = time.Second
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	_, prefix := sharedPrefix(t)
	b.store, err = redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	return b
}

func TestStore_CutConnection(t *testing.T) {
	t.Parallel()
	b := setupFault(t, -1)
	b.proxy.Cut()
	req := claimAt(time.Now(), "cut", time.Minute, time.Hour)
	_, err := b.store.Claim(b.ctx, req)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)

	b.proxy.Restore()
	res, err := b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
}

func TestStore_FrozenPathEndsWithTheContext(t *testing.T) {
	t.Parallel()
	b := setupFault(t, -1)
	req := claimAt(time.Now(), "frozen", time.Minute, time.Hour)
	res, err := b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)

	b.proxy.Freeze()
	ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = b.store.Complete(ctx, req.Scope, res.Token, time.Now(), &server.StoredResponse{Status: http.StatusOK})
	require.Error(t, err)
	require.Less(t, time.Since(start), 2*time.Second, "the call must end with its context, not the client's read timeout")
	require.Equal(t, 1, redisstore.HeldClaims(b.store), "a failed completion keeps the claim for a retry")

	b.proxy.Restore()
	require.NoError(t, b.store.Complete(b.ctx, req.Scope, res.Token, time.Now(), &server.StoredResponse{Status: http.StatusOK}))
}

// A reply lost on the way back makes go-redis retry the command on a new
// connection (MaxRetries): the script runs twice, and the second run must
// recognise the first's claim (or completion) as its own.
func TestStore_LostReplyIsRetriedAsTheSameClaim(t *testing.T) {
	t.Parallel()
	b := setupFault(t, 3)
	req := claimAt(time.Now(), "lost-reply", time.Minute, time.Hour)

	b.proxy.DropReplyTo(tcpfault.Contains([]byte(redisstore.ClaimScriptHash)))
	res, err := b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	require.Equal(t, 1, b.proxy.Dropped())
	require.True(t, res.Acquired, "the retried claim reported its own claim as someone else's: %+v", res.Existing)
	require.Equal(t, int64(1), res.Token)

	b.proxy.DropReplyTo(tcpfault.Contains([]byte(redisstore.CompleteScriptHash)))
	want := &server.StoredResponse{Status: http.StatusCreated, Body: []byte("done")}
	require.NoError(t, b.store.Complete(b.ctx, req.Scope, res.Token, time.Now(), want), "the retried completion found its own response")
	require.Equal(t, 2, b.proxy.Dropped())
	rec, err := b.store.Get(b.ctx, req.Scope, time.Now())
	require.NoError(t, err)
	require.Equal(t, server.StateCompleted, rec.State)
	require.Equal(t, "done", string(rec.Response.Body))

	// Without retries the lost reply is an error, and the claim stays held
	// until its lease ends (a retry of the request is told it is in flight).
	nr := setupFault(t, -1)
	req2 := claimAt(time.Now(), "lost-reply-no-retry", time.Minute, time.Hour)
	nr.proxy.DropReplyTo(tcpfault.Contains([]byte(redisstore.ClaimScriptHash)))
	_, err = nr.store.Claim(nr.ctx, req2)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	dup, err := nr.store.Claim(nr.ctx, req2)
	require.NoError(t, err)
	require.False(t, dup.Acquired)
	require.Equal(t, server.StateInProgress, dup.Existing.State)
}

// Through the middleware: with Redis cut or frozen the handler does not run
// and the request is answered 503 store-unavailable within the store
// timeout (fail closed). A claim frozen in transit reaches Redis after the
// middleware gave up on it: the key is held by a claim nobody runs until
// its lease ends, retries are told it is in flight (409), and then one of
// them takes it over and runs the handler once.
func TestMiddleware_RedisUnreachableFailsClosed(t *testing.T) {
	t.Parallel()
	b := setupFault(t, -1)
	m, err := server.New(b.store, &server.Config{
		PrincipalFunc: func(*http.Request) (string, error) { return "acct", nil },
		StoreTimeout:  300 * time.Millisecond,
		LeaseDuration: time.Second,
	})
	require.NoError(t, err)
	runs := map[string]*atomic.Int64{"warm-up": {}, "cut": {}, "frozen": {}}
	ts := httptest.NewServer(m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs[r.Header.Get("Idempotency-Key")].Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	defer ts.Close()
	post := func(key string) (int, string, error) {
		req, err := http.NewRequestWithContext(b.ctx, http.MethodPost, ts.URL+"/payments", strings.NewReader(`{}`))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := ts.Client().Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	// Connections are open before the faults: the frozen one has a command
	// in transit.
	status, body, err := post("warm-up")
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, body)

	for _, fault := range []struct {
		name  string
		apply func()
	}{{"cut", b.proxy.Cut}, {"frozen", b.proxy.Freeze}} {
		fault.apply()
		start := time.Now()
		status, body, err := post(fault.name)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s: %s", fault.name, body)
		require.Contains(t, body, wire.ProblemStoreUnavailable, fault.name)
		require.Less(t, time.Since(start), 3*time.Second, "%s: the claim must end by the store timeout", fault.name)
		require.Zero(t, runs[fault.name].Load(), "%s: the handler must not run without a claim", fault.name)
		b.proxy.Restore()

		require.Eventually(t, func() bool {
			status, _, err := post(fault.name)
			return err == nil && status == http.StatusCreated
		}, 20*time.Second, 50*time.Millisecond, "%s: the key never ran after the fault", fault.name)
		require.Equal(t, int64(1), runs[fault.name].Load(), fault.name)
	}
}

// A cluster master that dies takes its slots with it: a claim of a scope in
// them fails closed (go-redis redials the dead node until the call's
// deadline, so the error is context.DeadlineExceeded, or
// server.ErrStoreUnavailable), while scopes in the other masters' slots are
// still served.
func TestStore_ClusterMasterDownFailsClosed(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	cluster := testredis.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, PoolSize: 4,
		ContextTimeoutEnabled: true, DialTimeout: 200 * time.Millisecond, MaxRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, nil)
	require.NoError(t, err)

	// One scope on the master that dies, one elsewhere.
	victim := cluster.Addrs[0]
	var doomed, alive *server.ClaimRequest
	for i := 0; doomed == nil || alive == nil; i++ {
		require.Less(t, i, 1000, "no scope found on every master")
		req := claimAt(time.Now(), fmt.Sprintf("k%d", i), time.Minute, time.Hour)
		master, err := client.MasterForKey(ctx, redisstore.Key(store, req.Scope))
		require.NoError(t, err)
		switch on := master.Options().Addr == victim; {
		case on && doomed == nil:
			doomed = &req
		case !on && alive == nil:
			alive = &req
		}
	}
	cluster.Kill(t, victim)

	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = store.Claim(callCtx, *doomed)
	require.Error(t, err)
	t.Logf("claim on the dead master: %v", err)
	require.True(t, errors.Is(err, server.ErrStoreUnavailable) || errors.Is(err, context.DeadlineExceeded),
		"got %v, want ErrStoreUnavailable or the call's deadline", err)
	res, err := store.Claim(ctx, *alive)
	require.NoError(t, err, "the other masters' slots are still served")
	require.True(t, res.Acquired)
}
