package idemkit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestBudget_CrashLoopSendsAtMostTheBudget: a process that stops in the
// middle of every attempt (here: Do canceled while the server holds the
// request; a SIGKILLed holder is taken over the same way, due at once)
// never gets to check the budget after an answer. The claim checks it: of
// 15 tries, at most MaxAttemptsPerHour attempts reach the server, and the
// intent says why it waits.
func TestBudget_CrashLoopSendsAtMostTheBudget(t *testing.T) {
	t.Parallel()
	var seen atomic.Int64
	arrived := make(chan struct{}, 64)
	release := make(chan struct{})
	cfg := testConfig()
	cfg.MaxAttemptsPerHour = 5
	cfg.Logger = discardLogger()
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer close(release)
	req := &Request{URL: b.srv.URL + "/pay", Key: "crash-loop", Body: []byte(`{}`)}
	held := func() bool { // the claim held the intent instead of starting an attempt
		list, err := b.c.List(testkit.Ctx(t), nil)
		return err == nil && len(list) == 1 && list[0].NextAttemptAt.After(time.Now().Add(30*time.Minute))
	}
	for range 15 {
		ctx, cancel := context.WithCancel(testkit.Ctx(t))
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			defer cancel()
			poll := time.NewTicker(5 * time.Millisecond)
			defer poll.Stop()
			for {
				select {
				case <-arrived: // the attempt is on the wire: "crash"
					return
				case <-poll.C:
					if held() {
						return // nothing will be sent
					}
				}
			}
		}()
		_, err := b.c.Do(ctx, req)
		require.ErrorIs(t, err, context.Canceled)
		<-stopped
	}
	require.EqualValues(t, 5, seen.Load(), "at most the budget")
	in, err := b.c.get(testkit.Ctx(t), mustKeyID(t, b.c, "crash-loop"))
	require.NoError(t, err)
	require.Equal(t, StatePending, in.State)
	require.Contains(t, in.LastError, "5 attempts started in the last hour (Config.MaxAttemptsPerHour)")
	require.True(t, in.NextAttemptAt.After(time.Now().Add(50*time.Minute)), "due when the oldest attempt is an hour old: %v", in.NextAttemptAt)
}

func mustKeyID(t *testing.T, c *Client, key string) string {
	t.Helper()
	list, err := c.List(testkit.Ctx(t), nil)
	require.NoError(t, err)
	for _, in := range list {
		if in.Key == key {
			return in.ID
		}
	}
	t.Fatalf("no intent with key %q", key)
	return ""
}

// TestBudget_SIGKILLLoopSendsAtMostTheBudget is the crash loop with real
// processes: a child runs Do and is SIGKILLed while its attempt is on the
// wire, fifteen times; each restart takes the dead child's lease over at
// once. At most MaxAttemptsPerHour (5) attempts reach the server.
func TestBudget_SIGKILLLoopSendsAtMostTheBudget(t *testing.T) {
	t.Parallel()
	if !takeoverSupported {
		t.Skip("no liveness check on this OS")
	}
	var seen atomic.Int64
	arrived := make(chan struct{}, 64)
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client's death
		seen.Add(1)
		arrived <- struct{}{}
		<-r.Context().Done() // held until the client dies
	}))
	db := rawDB(t, b.path)
	held := func() bool {
		var next string
		err := db.QueryRow(`SELECT next_attempt_at FROM idemkit_intents WHERE key = 'sigkill-loop'`).Scan(&next)
		return err == nil && next > time.Now().Add(30*time.Minute).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	for i := range 15 {
		child := startChild(t, "do", fmt.Sprint("do-", i), b.path, b.srv.URL, childKeyEnv+"=sigkill-loop", childPerHourEnv+"=5", childLeaseEnv+"=60s")
		poll := time.NewTicker(5 * time.Millisecond)
	wait:
		for {
			select {
			case <-arrived:
				break wait
			case <-poll.C:
				if held() {
					break wait
				}
			}
		}
		poll.Stop()
		require.NoError(t, child.Process.Kill())
		_ = child.Wait()
	}
	require.EqualValues(t, 5, seen.Load(), "at most the budget reached the server")
	require.True(t, held(), "the intent waits for the budget")
}

// TestAttemptBudget_BoundsAttemptsPerHour: whatever the server says, an
// intent gets at most Config.MaxAttemptsPerHour attempts in any hour; the
// next one is due when the oldest of them is an hour old.
func TestAttemptBudget_BoundsAttemptsPerHour(t *testing.T) {
	t.Parallel()
	s := newScripted(t, "Idempotency-Key", answer(http.StatusServiceUnavailable, "", "Retry-After", "0"))
	cfg := testConfig()
	cfg.MaxAttemptsPerHour = 3
	b := setup(t, cfg, nil)
	in, err := b.c.Do(shortCtx(t, 2*time.Second), &Request{URL: s.srv.URL})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.EqualValues(t, 3, s.n.Load())
	require.Equal(t, 3, in.Attempts)
	log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.False(t, in.NextAttemptAt.Before(log[0].StartedAt.Add(time.Hour)),
		"next attempt %v, want at least an hour after the first (%v)", in.NextAttemptAt, log[0].StartedAt)
	require.Contains(t, in.LastError, "MaxAttemptsPerHour")
}
