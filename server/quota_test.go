package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

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

// A key that exists is never answered quota-exceeded: with the principal
// at its key quota, a retry of a key whose request is still running gets
// 409 in-flight (the report: 429 with Retry-After: 86400 on PostgreSQL in
// transactional mode, where the in-flight claim is not yet committed), and
// a retry of a completed key its replay.
func TestQuota_ExistingKeyIsNeverRefused(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.MaxKeysPerPrincipal = 2
			c.LeaseDuration = 20 * time.Second
		})
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "mallory", keys: []string{"done"}, body: mwBody}).Status)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		running := make(chan *mwResponse, 1)
		go func() {
			res, err := b.send(ctx, mwReq{path: "/block", principal: "mallory", keys: []string{"running"}, body: mwBody})
			if err != nil {
				res = &mwResponse{Status: -1, Body: []byte(err.Error())}
			}
			running <- res
		}()
		require.Equal(t, "mallory", mwRecv(t, b.started))

		// A third key would exceed the quota of two.
		third := b.do(t, mwReq{principal: "mallory", keys: []string{"third"}, body: mwBody})
		require.NotEqual(t, http.StatusCreated, third.Status, "a third key must not be admitted: body %s", third.Body)

		retry := b.do(t, mwReq{path: "/block", principal: "mallory", keys: []string{"running"}, body: mwBody})
		retry.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)

		mwSend(t, b.release)
		require.Equal(t, http.StatusCreated, mwRecv(t, running).Status)
		for _, key := range []string{"running", "done"} {
			path := "/payments"
			if key == "running" {
				path = "/block"
			}
			again := b.do(t, mwReq{path: path, principal: "mallory", keys: []string{key}, body: mwBody})
			require.Equal(t, http.StatusCreated, again.Status, "key %s: body %s", key, again.Body)
			require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed), "key %s", key)
		}
		require.Equal(t, 2, b.count(t, mwCountRecords))
	})
}

// A burst of concurrent new keys from one principal never stores more
// records than its key quota (the report: 33-40 records against a quota
// of 10). On one replica the quota is exact; see Config.MaxKeysPerPrincipal
// for several.
func TestQuota_BurstOfNewKeysNeverOvershoots(t *testing.T) {
	t.Parallel()
	const (
		quota = 10
		burst = 40
	)
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.MaxKeysPerPrincipal = quota
			c.LockTimeout = 5 * time.Second
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		statuses := make(chan int, burst)
		for i := range burst {
			go func() {
				res, err := b.send(ctx, mwReq{principal: "mallory", keys: []string{"burst-" + strconv.Itoa(i)}, body: mwBody})
				if err != nil {
					statuses <- -1
					return
				}
				statuses <- res.Status
			}()
		}
		// A claim that waits out StoreTimeout behind SQLite's writer on a
		// loaded machine is answered 503 and stores nothing: it is neither
		// admitted nor refused by the quota.
		created, refused, unavailable := 0, 0, 0
		for range burst {
			switch <-statuses {
			case http.StatusCreated:
				created++
			case http.StatusTooManyRequests:
				refused++
			case http.StatusServiceUnavailable:
				unavailable++
			}
		}
		records := b.count(t, mwCountRecords)
		require.LessOrEqual(t, records, quota, "records stored against a quota of %d", quota)
		require.Equal(t, records, created)
		if mode == server.ModeLease {
			require.Equal(t, quota, created, "one replica admits exactly the quota")
			require.Equal(t, burst-quota, refused+unavailable)
		}
	})
}
