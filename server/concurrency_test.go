package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
)

func TestMiddleware_SameKeyConcurrently(t *testing.T) {
	t.Parallel()
	const n = 64
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		// This test is about one execution among racing requests, not about
		// how long SQLite's single writer may queue 64 fsynced claims: on a
		// loaded machine they can take longer than StoreTimeout's 5 s default.
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.LockTimeout = 3 * time.Second
			c.StoreTimeout = 30 * time.Second
		})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		start := make(chan struct{})
		results := make([]*mwResponse, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = b.send(ctx, mwReq{principal: "alice", keys: []string{"same"}, body: mwBody})
			})
		}
		close(start)
		wg.Wait()

		var fresh, replays, conflicts int
		var freshBody string
		for i, res := range results {
			require.NoError(t, errs[i])
			switch {
			case res.Status == http.StatusCreated && res.Header.Get(wire.HeaderReplayed) == "":
				fresh++
				freshBody = string(res.Body)
			case res.Status == http.StatusCreated:
				replays++
			case res.Status == http.StatusConflict:
				res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
				require.NotEmpty(t, res.Header.Get("Retry-After"))
				conflicts++
			default:
				t.Fatalf("response %d: status %d, body %s; want 201 or 409", i, res.Status, res.Body)
			}
		}
		require.Equal(t, 1, fresh, "exactly one execution")
		require.Equal(t, n, fresh+replays+conflicts)
		for _, res := range results {
			if res.Status == http.StatusCreated {
				require.Equal(t, freshBody, string(res.Body), "every replay is the one execution's response")
			}
		}
		require.EqualValues(t, 1, b.runs.Load(), "exactly one handler run")
		require.Equal(t, 1, b.count(t, mwCountEffects), "exactly one effect row")
		require.Equal(t, 1, b.count(t, mwCountRecords))
		t.Logf("%s/%s: 1 execution, %d replays, %d conflicts", kind, mode, replays, conflicts)
	})
}

// Two tenants using the same key string each get their own execution, and
// neither learns anything about the other's key: no replay, no 409, no 422.
func TestMiddleware_TenantsAreIsolated(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		aBody, bBody := `{"amount":4000,"to":"landlord"}`, `{"amount":1,"to":"cafe"}`

		concurrent := !(kind == mwSQLite && mode == server.ModeTransactional)
		aDone := make(chan *mwResponse, 1)
		go func() {
			res, err := b.send(ctx, mwReq{path: "/block", principal: "alice", keys: []string{"retry-1"}, body: aBody})
			if err != nil {
				t.Errorf("alice: %v", err)
			}
			aDone <- res
		}()
		require.Equal(t, "alice", mwRecv(t, b.started))
		if !concurrent {
			// SQLite has one writer: a transactional claim holds it until
			// the handler returns, so bob would wait (and get a 503
			// store-busy, never a 409/422). Let alice finish first.
			mwSend(t, b.release)
		}

		// Bob (his own body) and carol (alice's very body), same key string,
		// while alice's request is in flight (or, for SQLite transactional,
		// just completed).
		others := make(chan *mwResponse, 2)
		for _, q := range []mwReq{
			{path: "/block", principal: "bob", keys: []string{"retry-1"}, body: bBody},
			{path: "/block", principal: "carol", keys: []string{"retry-1"}, body: aBody},
		} {
			go func() {
				res, err := b.send(ctx, q)
				if err != nil {
					t.Errorf("%s: %v", q.principal, err)
				}
				others <- res
			}()
			if !concurrent {
				require.Equal(t, q.principal, mwRecv(t, b.started))
				mwSend(t, b.release)
			}
		}
		if concurrent {
			got := []string{mwRecv(t, b.started), mwRecv(t, b.started)}
			require.ElementsMatch(t, []string{"bob", "carol"}, got, "their handlers run while alice's is in flight")
			for range 3 {
				mwSend(t, b.release)
			}
		}
		a := mwRecv(t, aDone)
		require.NotNil(t, a)
		require.Equal(t, http.StatusCreated, a.Status)
		require.Contains(t, string(a.Body), "alice")
		for range 2 {
			res := mwRecv(t, others)
			require.NotNil(t, res)
			require.Equal(t, http.StatusCreated, res.Status, "each tenant gets its own execution, never a 409/422 from alice's key: %s", res.Body)
			require.Empty(t, res.Header.Get(wire.HeaderReplayed))
			require.NotContains(t, string(res.Body), "alice")
		}
		require.EqualValues(t, 3, b.runs.Load())
		require.Equal(t, 3, b.count(t, mwCountEffects))

		// Replays stay within each tenant.
		res := b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"retry-1"}, body: aBody})
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, string(a.Body), string(res.Body))
		res = b.do(t, mwReq{path: "/block", principal: "bob", keys: []string{"retry-1"}, body: bBody})
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		var got map[string]any
		require.NoError(t, json.Unmarshal(res.Body, &got))
		require.Equal(t, "bob", got["principal"])
		require.Equal(t, bBody, got["request"])
		res = b.do(t, mwReq{path: "/block", principal: "carol", keys: []string{"retry-1"}, body: aBody})
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		require.Contains(t, string(res.Body), "carol")
		require.NotContains(t, string(res.Body), "alice")
		// A fourth tenant learns nothing either.
		res = b.do(t, mwReq{path: "/teapot", principal: "dave", keys: []string{"retry-1"}, body: aBody})
		require.Equal(t, http.StatusTeapot, res.Status)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
	})
}

func TestMiddleware_HeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		// Long enough that an extension (every lease/3, each bounded by
		// lease/3) is not lost to a slow round trip under -race on a loaded
		// 2-core machine, where a 600 ms lease lost its claim on MySQL.
		const lease = 1500 * time.Millisecond
		b := mwSetup(t, kind, server.ModeLease, func(c *server.Config) { c.LeaseDuration = lease })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done := make(chan *mwResponse, 1)
		go func() {
			res, _ := b.send(ctx, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
			done <- res
		}()
		mwRecv(t, b.started)
		sc := server.Scope{Principal: "alice", Endpoint: "*", Key: "k"}
		rec, err := b.store.Get(ctx, sc, b.clock.Now())
		require.NoError(t, err)
		first := rec.LockedUntil

		// Poll until the lease has been extended past its first end, twice
		// over: only the heartbeat can do that.
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			rec, err = b.store.Get(ctx, sc, b.clock.Now())
			require.NoError(t, err)
			if rec.LockedUntil.After(first.Add(2*lease)) && time.Now().After(first.Add(lease)) {
				break
			}
			require.True(t, time.Now().Before(deadline), "lease never extended: locked_until %v, first %v", rec.LockedUntil, first)
			<-tick.C
		}
		require.Equal(t, server.StateInProgress, rec.State)
		// The original lease is over, but the heartbeat kept the claim: a
		// retry is a 409, not a takeover.
		res := b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
		res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)

		close(b.release)
		require.Equal(t, http.StatusCreated, mwRecv(t, done).Status)
		rec, err = b.store.Get(ctx, sc, b.clock.Now())
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State)
		require.EqualValues(t, 1, rec.Token)
		require.EqualValues(t, 1, b.runs.Load())
	})
}

func TestMiddleware_Metrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	met, err := prommetrics.New(reg)
	require.NoError(t, err)
	b := mwSetup(t, mwSQLite, server.ModeLease, func(c *server.Config) {
		record := c.OnEventFunc
		c.OnEventFunc = func(r *http.Request, e server.Event) {
			record(r, e)
			met.Observe(r, e)
		}
	})

	b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})                  // claim
	b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})                  // replay
	b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: `{"other":1}`})           // mismatch
	b.do(t, mwReq{path: "/fail", principal: "alice", keys: []string{"f"}, body: mwBody})   // claim + release
	b.do(t, mwReq{principal: "alice", body: mwBody})                                       // rejected
	b.do(t, mwReq{path: "/panic", principal: "alice", keys: []string{"p"}, body: mwBody})  // claim + release
	b.do(t, mwReq{path: "/teapot", principal: "alice", keys: []string{"t"}, body: mwBody}) // claim

	val := func(name string, labels ...string) float64 { return mwMetricValue(t, reg, name, labels...) }
	require.InDelta(t, 4, val("idemkit_server_claims_total"), 0)
	require.InDelta(t, 1, val("idemkit_server_replays_total"), 0)
	require.InDelta(t, 1, val("idemkit_server_mismatches_total"), 0)
	require.InDelta(t, 2, val("idemkit_server_releases_total"), 0)
	require.InDelta(t, 0, val("idemkit_server_conflicts_total"), 0)
	require.InDelta(t, 2, val("idemkit_server_requests_total", "outcome", string(server.OutcomeExecuted)), 0)
	require.InDelta(t, 1, val("idemkit_server_requests_total", "outcome", string(server.OutcomeRejected)), 0)
	require.InDelta(t, 2, val("idemkit_server_requests_total", "outcome", string(server.OutcomeReleased)), 0)
	require.InDelta(t, 1, val("idemkit_server_requests_total", "outcome", string(server.OutcomeReplayed)), 0)
	require.InDelta(t, 6, val("idemkit_server_claim_duration_seconds"), 0, "one claim statement per keyed request")

	// The store breaks: a store error is counted.
	require.NoError(t, b.db.Close())
	b.do(t, mwReq{principal: "alice", keys: []string{"z"}, body: mwBody})
	require.InDelta(t, 1, val("idemkit_server_store_errors_total", "op", "claim"), 0)

	// One Middleware per Registerer.
	_, err = prommetrics.New(reg)
	require.ErrorContains(t, err, "already registered")
}

// mwMetricValue returns the value of a counter (or the sample count of a
// histogram) gathered from reg, with the given label name/value pairs; 0 if
// it has no such series.
func mwMetricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Nothing reaches the client before the outcome is durable: when the first
// byte of the response arrives, the record is already completed (lease mode)
// or committed (transactional mode), even though the handler flushed.
func TestMiddleware_NothingSentBeforeStored(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		mux := http.NewServeMux()
		mux.Handle("POST /flushy", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			for i := range 3 {
				fmt.Fprintf(w, "part %d\n", i)
				if err := http.NewResponseController(w).Flush(); err != nil {
					t.Errorf("Flush: %v", err)
				}
			}
		})))
		srv := httptest.NewServer(mux)
		defer srv.Close()

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sc := server.Scope{Principal: "alice", Endpoint: "*", Key: "k"}
		stateAtFirstByte := make(chan server.State, 1)
		trace := &httptrace.ClientTrace{GotFirstResponseByte: func() {
			rec, err := b.store.Get(ctx, sc, b.clock.Now())
			if err != nil {
				t.Errorf("Get at first byte: %v", err)
				stateAtFirstByte <- ""
				return
			}
			stateAtFirstByte <- rec.State
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, srv.URL+"/flushy", strings.NewReader("x"))
		require.NoError(t, err)
		req.Header.Set("X-Principal", "alice")
		req.Header.Set(server.HeaderKey, "k")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, "part 0\npart 1\npart 2\n", string(body))
		require.Equal(t, server.StateCompleted, mwRecv(t, stateAtFirstByte))
	})
}
