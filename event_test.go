package idemkit

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// eventLog collects the events of a Client.
type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.ev...)
}

func kinds(ev []Event) []EventKind {
	out := make([]EventKind, len(ev))
	for i, e := range ev {
		out[i] = e.Kind
	}
	return out
}

// TestEvents_DescribeEveryStep: one intent answered 503, then 201: the
// hook sees each attempt start, each answer, the retry with its reason
// and wait, and the end with the final state.
func TestEvents_DescribeEveryStep(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var log eventLog
	cfg := testConfig()
	cfg.OnEventFunc = log.add
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL + "/pay?order=secret"})
	require.NoError(t, err)
	ev := log.all()
	require.Equal(t, []EventKind{EventAttemptStarted, EventAnswered, EventRetrying, EventAttemptStarted, EventAnswered, EventEnded}, kinds(ev))
	for _, e := range ev {
		require.Equal(t, in.ID, e.IntentID)
		require.Equal(t, in.Key, e.Key)
		require.NotContains(t, e.URL, "secret", "the URL's query is redacted")
		require.False(t, e.At.IsZero())
	}
	require.Equal(t, 1, ev[0].Attempt)
	require.Equal(t, http.StatusServiceUnavailable, ev[1].Status)
	require.Equal(t, "status 503", ev[2].Reason)
	require.Positive(t, ev[2].Wait)
	require.Equal(t, 2, ev[3].Attempt)
	require.Equal(t, http.StatusCreated, ev[4].Status)
	require.False(t, ev[4].Replayed)
	require.Equal(t, StateSucceeded, ev[5].State)
	require.Equal(t, http.StatusCreated, ev[5].Status)
	require.Equal(t, 2, ev[5].Attempt)
}

// TestEvents_LongWaitIsRescheduled: a wait longer than MaxSleep is written
// to the queue: the hook says when the next attempt is due, and why.
func TestEvents_LongWaitIsRescheduled(t *testing.T) {
	t.Parallel()
	var log eventLog
	cfg := testConfig()
	cfg.OnEventFunc = log.add
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.c.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		for _, e := range log.all() {
			if e.Kind == EventRetrying && e.Queued {
				return true
			}
		}
		return false
	}, "a rescheduled event")
	cancel()
	require.NoError(t, <-done)
	var re Event
	for _, e := range log.all() {
		if e.Kind == EventRetrying && e.Queued {
			re = e
		}
	}
	require.Equal(t, in.ID, re.IntentID)
	require.Contains(t, re.Reason, "Retry-After: 3600")
	require.WithinDuration(t, re.At.Add(time.Hour), re.Next, 5*time.Second)
}

// A *slog.Logger is also go-retryablehttp's LeveledLogger, for
// Config.HTTPClient.Logger.
var _ retryablehttp.LeveledLogger = slog.Default()

// TestDo_InterruptedKeepsTheAttemptsError: stopping Do while the server
// is unreachable leaves the connection error as the stored LastError, not
// "context canceled".
func TestDo_InterruptedKeepsTheAttemptsError(t *testing.T) {
	t.Parallel()
	var log eventLog
	cfg := testConfig()
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 20 * time.Millisecond }
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	var n atomic.Int32
	cfg.OnEventFunc = func(e Event) {
		log.add(e)
		if e.Kind == EventRetrying && !e.Queued && n.Add(1) == 2 {
			cancel()
		}
	}
	b := setup(t, cfg, nil)
	in, err := b.c.Do(ctx, &Request{URL: "http://" + testkit.ClosedAddr(t) + "/pay"})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, StatePending, in.State)
	require.NotContains(t, in.LastError, "context canceled")
	require.Contains(t, in.LastError, "refused")
}
