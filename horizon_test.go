package idemkit

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestClient_HorizonNeverCrossed: a server that is down for good, a clock
// that jumps ahead at every attempt. No attempt may start after the
// horizon; the intent ends expired.
func TestClient_HorizonNeverCrossed(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var mu sync.Mutex
	var sentAt []time.Time
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	cfg.Window = time.Hour
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return time.Millisecond }
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sentAt = append(sentAt, clock.Now())
		mu.Unlock()
		clock.Advance(7 * time.Minute) // each attempt "takes" 7 minutes
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.ErrorIs(t, err, StateExpired)
	require.Equal(t, StateExpired, in.State)
	require.Nil(t, in.Outcome, "the outcome is unknown")
	// Window 1h, margin min(1m, 6m) = 1m: horizon = first + 59m.
	require.Equal(t, in.FirstAttemptAt.Add(59*time.Minute), in.Horizon)
	require.NotEmpty(t, sentAt)
	for i, at := range sentAt {
		require.False(t, at.After(in.Horizon), "attempt %d sent at %v, after the horizon %v", i+1, at, in.Horizon)
	}
	require.Equal(t, 9, len(sentAt), "attempts at 0, 7, ..., 56 minutes")
	require.Contains(t, in.LastError, "horizon")
}

// TestClient_LongRetryAfter: a year-long Retry-After is clamped to the
// horizon and persisted (not slept); meanwhile the worker sends the other
// intents. The clamped last attempt happens just before the horizon.
func TestClient_LongRetryAfter(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	cfg.Window = 2 * time.Hour
	var slowCalls atomic.Int32
	var lastSlow atomic.Value
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			lastSlow.Store(clock.Now())
			if slowCalls.Add(1) == 1 {
				w.Header().Set("Retry-After", "31536000")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	defer cancel()
	slow, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/slow"})
	require.NoError(t, err)
	runErr := make(chan error, 1)
	go func() { runErr <- b.c.Run(ctx) }()

	testkit.Eventually(t, 10*time.Second, func() bool {
		in, _ := b.c.Get(ctx, slow.ID)
		return in != nil && in.Attempts == 1 && in.NextAttemptAt.After(clock.Now().Add(time.Hour))
	}, "long wait persisted as next_attempt_at")
	in, err := b.c.Get(ctx, slow.ID)
	require.NoError(t, err)
	hz := policy.Horizon{Window: 2 * time.Hour, Safety: b.c.cfg.SafetyMargin}
	lead := hz.Lead()
	require.Equal(t, in.Horizon.Add(-lead), in.NextAttemptAt, "a year is clamped to just before the horizon")

	// The worker moved on: another intent is sent meanwhile.
	fast, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/fast"})
	require.NoError(t, err)
	got, err := b.c.Wait(ctx, fast.ID)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, got.State)

	clock.Set(in.NextAttemptAt)
	got, err = b.c.Wait(ctx, slow.ID)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, got.State)
	require.Equal(t, 2, got.Attempts)
	require.False(t, lastSlow.Load().(time.Time).After(got.Horizon))
	cancel()
	require.NoError(t, <-runErr)
}

// TestClient_WindowLearned: a server advertising a shorter
// Idempotency-Window shortens the horizon of the intent, and of the next
// intents to that host, also in another process (it is in the queue).
func TestClient_WindowLearned(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	var n atomic.Int32
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotency-Window", "600")
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	ctx := testkit.Ctx(t)
	in, err := b.c.Do(ctx, &Request{URL: b.srv.URL})
	require.NoError(t, err)
	// 24h configured, 600s advertised: margin min(1m, 60s) = 1m.
	require.Equal(t, in.FirstAttemptAt.Add(9*time.Minute), in.Horizon)

	// A new process knows the window before its first response.
	c2 := b.reopen(t, cfg)
	in2, err := c2.Submit(ctx, &Request{URL: b.srv.URL + "/other"})
	require.NoError(t, err)
	cl, err := c2.q.Claim(ctx, in2.ID, clock.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.Equal(t, clock.Now().Add(9*time.Minute), cl.Intent.Horizon)
	var secs int
	require.NoError(t, rawDB(t, b.path).QueryRow(`SELECT window_seconds FROM idemkit_hosts`).Scan(&secs))
	require.Equal(t, 600, secs)
}

// TestClient_HorizonNeverExtended: a restart with a longer window, and a
// clock stepped back, leave the stored horizon where it was.
func TestClient_HorizonNeverExtended(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	cfg.Window = time.Hour
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	ctx := testkit.Ctx(t)
	in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
	require.NoError(t, err)
	cl, err := b.c.q.Claim(ctx, in.ID, clock.Now(), time.Minute, nil)
	require.NoError(t, err)
	_, err = b.c.send(ctx, cl, false)
	require.NoError(t, err)
	first, err := b.c.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, StatePending, first.State)
	require.Equal(t, first.FirstAttemptAt.Add(59*time.Minute), first.Horizon)

	// Restart with a 48h window and a clock stepped back an hour.
	cfg2 := testConfig()
	cfg2.Window = 48 * time.Hour
	clock2 := newFakeClock()
	clock2.Set(clock.Now().Add(-time.Hour))
	cfg2.timeNowFunc = clock2.Now
	c2 := b.reopen(t, cfg2)
	clock2.Set(first.NextAttemptAt) // due again
	cl, err = c2.q.Claim(ctx, in.ID, c2.now(), time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, first.Horizon, cl.Intent.Horizon, "stored horizon is never extended")

	// Within a process the clock never goes back.
	before := c2.now()
	clock2.Set(before.Add(-24 * time.Hour))
	require.Equal(t, before, c2.now())
	_, err = c2.send(ctx, cl, false)
	require.NoError(t, err)
}

// TestClient_ExpiresWithoutSending: an intent whose horizon passed while it
// waited (a long Retry-After, a process that was down) ends expired at its
// next claim, by Do or Run, without another request.
func TestClient_ExpiresWithoutSending(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"Do", "Run"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			cfg := testConfig()
			cfg.timeNowFunc = clock.Now
			cfg.Window = time.Hour
			var sent atomic.Int32
			b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent.Add(1)
				w.Header().Set("Retry-After", "600")
				w.WriteHeader(http.StatusServiceUnavailable)
			}))
			ctx := testkit.Ctx(t)
			in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
			require.NoError(t, err)
			cl, err := b.c.q.Claim(ctx, in.ID, clock.Now(), time.Minute, nil)
			require.NoError(t, err)
			_, err = b.c.send(ctx, cl, false)
			require.NoError(t, err)
			require.EqualValues(t, 1, sent.Load())

			clock.Advance(2 * time.Hour) // the process was down
			var got *Intent
			if via == "Do" {
				got, err = b.c.driveID(ctx, in.ID)
			} else {
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- b.c.Run(rctx) }()
				got, err = b.c.Wait(ctx, in.ID)
				cancel()
				require.NoError(t, <-done)
			}
			require.ErrorIs(t, err, StateExpired)
			require.Equal(t, StateExpired, got.State)
			require.EqualValues(t, 1, sent.Load(), "nothing sent after the horizon")
			require.Contains(t, got.LastError, "status 503")
		})
	}
}
