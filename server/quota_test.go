package server_test

import (
	"context"
	"net/http"
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

func TestNew_QuotasNeedPrincipalUsage(t *testing.T) {
	t.Parallel()
	s := mwNewStore(t, mwSQLite)
	_, err := server.New(struct{ server.Store }{s.store}, &server.Config{PrincipalFunc: mwPrincipal, MaxKeysPerPrincipal: 1})
	require.ErrorContains(t, err, "PrincipalUsage")
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
