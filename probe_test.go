package idemkit

import (
	"context"
	"database/sql"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

// TestRun_FirstSuccessSoonAfterTheServerReturns: five intents against a
// server that drops every connection for three minutes, with the
// backoff at its 30 s cap. The injected clock jumps from one due time to
// the next (a discrete-event run: no wait is slept for real). Once the
// server is back, the first success comes within 2 s and every intent
// succeeds within 2 s, not up to 30 s later.
func TestRun_FirstSuccessSoonAfterTheServerReturns(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	cfg.Concurrency = 2
	cfg.MaxSleep = time.Millisecond // every wait goes to the queue: the clock decides
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return policy.BackoffCap }
	var up atomic.Bool
	var mu sync.Mutex
	var succeeded []time.Time
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // no answer at all
			}
			return
		}
		mu.Lock()
		succeeded = append(succeeded, clock.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	const n = 5
	for range n {
		_, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
		require.NoError(t, err)
	}
	done := make(chan error, 1)
	go func() { done <- b.c.Run(ctx) }()
	db := rawDB(t, b.path)

	start := clock.Now()
	var back time.Time
	for step := 0; ; step++ {
		require.Less(t, step, 2000, "too many steps")
		next, pending := settle(t, db, clock.Now())
		if pending == 0 {
			break
		}
		if back.IsZero() && clock.Now().Sub(start) >= 3*time.Minute {
			back = clock.Now()
			up.Store(true)
		}
		clock.Set(next)
	}
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, succeeded, n)
	for _, at := range succeeded {
		require.LessOrEqual(t, at.Sub(back), 2*time.Second, "success %v after the server came back", at.Sub(back))
	}
}

// settle waits until no pending intent is due at now or held, and returns
// the earliest due time and the number pending.
func settle(t *testing.T, db *sql.DB, now time.Time) (time.Time, int) {
	t.Helper()
	var next sql.NullString
	var pending int
	testkit.Eventually(t, 10*time.Second, func() bool {
		var busy int
		err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(lease_owner IS NOT NULL OR next_attempt_at <= ?), 0), MIN(next_attempt_at)
			FROM idemkit_intents WHERE state = 'pending'`, wire.FormatTime(now)).Scan(&pending, &busy, &next)
		return err == nil && busy == 0
	}, "the workers settle")
	if pending == 0 {
		return time.Time{}, 0
	}
	at, err := wire.ParseTime(next.String)
	require.NoError(t, err)
	return at, pending
}

// TestRun_ProbeSpendsHalfTheBudget: a lone intent against a host that
// does not answer probes it every second for half its MaxAttemptsPerHour,
// then falls back to its backoff (the rest of the budget is its own).
func TestRun_ProbeSpendsHalfTheBudget(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	cfg.MaxSleep = time.Millisecond
	cfg.MaxAttemptsPerHour = 10
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return policy.BackoffCap }
	b := setup(t, cfg, nil)
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	_, err := b.c.Submit(ctx, &Request{URL: "http://" + testkit.ClosedAddr(t)})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.c.Run(ctx) }()
	db := rawDB(t, b.path)
	var gaps []time.Duration
	for range 7 {
		next, pending := settle(t, db, clock.Now())
		require.Equal(t, 1, pending)
		gaps = append(gaps, next.Sub(clock.Now()))
		clock.Set(next)
	}
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, []time.Duration{time.Second, time.Second, time.Second, time.Second, policy.BackoffCap, policy.BackoffCap, policy.BackoffCap}, gaps)
}
