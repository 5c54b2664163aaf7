package idemkit

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestRun_DownServerGivesEveryIntentAttempts: with the server down and
// more intents than Concurrency, every intent gets attempts (a worker
// whose intent must wait gives its slot to the others), not only the
// first Concurrency.
func TestRun_DownServerGivesEveryIntentAttempts(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Concurrency = 2
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 200 * time.Millisecond }
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	const n = 10
	for range n {
		_, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
		require.NoError(t, err)
	}
	done := make(chan error, 1)
	go func() { done <- b.c.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		list, err := b.c.List(ctx, &ListOptions{State: StatePending})
		if err != nil || len(list) != n {
			return false
		}
		for _, in := range list {
			if in.Attempts < 2 {
				return false
			}
		}
		return true
	}, "every intent attempted at least twice")
	cancel()
	require.NoError(t, <-done)
}

// TestDrain_ReturnsOnceNothingIsPending: Drain sends everything due,
// waits out short retries, and returns the counts once the queue is empty
// of pending intents.
func TestDrain_ReturnsOnceNothingIsPending(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		n := seen[r.Header.Get("Idempotency-Key")]
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	ctx := testkit.Ctx(t)
	for range 6 {
		_, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
		require.NoError(t, err)
	}
	counts, err := b.c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StateSucceeded: 6}, counts)
}

// TestDrain_LeavesLongWaitsQueued: an intent told to come back in an hour
// does not keep Drain waiting: it returns with that intent pending.
func TestDrain_LeavesLongWaitsQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/later" {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	ctx := testkit.Ctx(t)
	_, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/later"})
	require.NoError(t, err)
	_, err = b.c.Submit(ctx, &Request{URL: b.srv.URL + "/now"})
	require.NoError(t, err)
	counts, err := b.c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StateSucceeded: 1, StatePending: 1}, counts)
}

// TestDrain_StopsWhenContextEnds: a server that never answers keeps the
// intent due within the deadline: Drain returns at the deadline with its
// error, the intent pending.
func TestDrain_StopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	_, err := b.c.Submit(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(testkit.Ctx(t), 300*time.Millisecond)
	defer cancel()
	counts, err := b.c.Drain(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, map[IntentState]int{StatePending: 1}, counts)
}

// TestMaxAttempts_BoundsThisClientsAttempts: with Config.MaxAttempts, Do
// returns the intent pending with StatePending after that many attempts;
// Drain then returns at once (it is not claimed again here), and another
// Client sends it again.
func TestMaxAttempts_BoundsThisClientsAttempts(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	cfg := testConfig()
	cfg.MaxAttempts = 3
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	ctx := testkit.Ctx(t)
	in, err := b.c.Do(ctx, &Request{URL: b.srv.URL})
	require.ErrorIs(t, err, StatePending)
	require.Equal(t, StatePending, in.State)
	require.Equal(t, 3, in.Attempts)
	require.Equal(t, "status 503", in.LastError)
	require.EqualValues(t, 3, calls.Load())

	counts, err := b.c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StatePending: 1}, counts)
	require.EqualValues(t, 3, calls.Load(), "not claimed again by this Client")

	fail.Store(false)
	other := b.reopen(t, testConfig())
	counts, err = other.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StateSucceeded: 1}, counts)
}

// TestDrain_ClosedClient: Drain on a closed Client is ErrClosed.
func TestDrain_ClosedClient(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	c := b.reopen(t, nil)
	require.NoError(t, c.Close())
	_, err := c.Drain(testkit.Ctx(t))
	require.ErrorIs(t, err, ErrClosed)
}
