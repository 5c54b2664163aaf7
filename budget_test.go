package idemkit

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

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
		list, err := b.c.List(testCtx(t), nil)
		return err == nil && len(list) == 1 && list[0].NextAttemptAt.After(time.Now().Add(30*time.Minute))
	}
	for range 15 {
		ctx, cancel := context.WithCancel(testCtx(t))
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
	in, err := b.c.q.get(testCtx(t), mustKeyID(t, b.c, "crash-loop"))
	require.NoError(t, err)
	require.Equal(t, StatePending, in.State)
	require.Contains(t, in.LastError, "5 attempts started in the last hour (Config.MaxAttemptsPerHour)")
	require.True(t, in.NextAttemptAt.After(time.Now().Add(50*time.Minute)), "due when the oldest attempt is an hour old: %v", in.NextAttemptAt)
}

func mustKeyID(t *testing.T, c *Client, key string) string {
	t.Helper()
	list, err := c.List(testCtx(t), nil)
	require.NoError(t, err)
	for _, in := range list {
		if in.Key == key {
			return in.ID
		}
	}
	t.Fatalf("no intent with key %q", key)
	return ""
}
