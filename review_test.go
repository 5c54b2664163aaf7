package idemkit

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReview_ListSkipsDamagedRow: one row that cannot be decoded does not
// hide the others; List returns them with an ErrQueueCorrupt naming it.
func TestReview_ListSkipsDamagedRow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testCtx(t)
	good1, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/a"})
	require.NoError(t, err)
	bad, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/bad"})
	require.NoError(t, err)
	good2, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/b"})
	require.NoError(t, err)
	_, err = rawDB(t, b.path).Exec(`UPDATE idemkit_intents SET header = X'7B7B' WHERE id = ?`, bad.ID)
	require.NoError(t, err)

	list, err := b.c.List(ctx, nil)
	require.ErrorIs(t, err, ErrQueueCorrupt)
	require.Contains(t, err.Error(), bad.ID)
	var ids []string
	for _, in := range list {
		ids = append(ids, in.ID)
	}
	require.ElementsMatch(t, []string{good1.ID, good2.ID}, ids, "the good rows are still listed")
}

// TestReview_Replayed422IsNotKeyReused: a 422 replayed from the server's
// store (Idempotent-Replayed: true) is the handler's own answer to this very
// request, stored under this key: a definitive failure, not a reused key.
func TestReview_Replayed422IsNotKeyReused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error":"amount must be positive"}`)
	}))
	in, err := b.c.Do(testCtx(t), &Request{URL: b.srv.URL})
	require.ErrorIs(t, err, ErrFailed)
	require.NotErrorIs(t, err, ErrKeyReused)
	require.Equal(t, StateFailed, in.State)
	require.True(t, in.Outcome.Replayed)
	require.Equal(t, http.StatusUnprocessableEntity, in.Outcome.Status)
}

// TestReview_CancelDuringSleepKeepsAttemptLog: canceling Do while it sleeps
// between two attempts must not overwrite the log entry of the attempt that
// already finished (its status).
func TestReview_CancelDuringSleepKeepsAttemptLog(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 20 * time.Second }
	var calls atomic.Int32
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.c.Wait(ctx, in.ID)
		done <- err
	}()
	runDone := make(chan error, 1)
	go func() { runDone <- b.c.Run(ctx) }()
	eventually(t, 10*time.Second, func() bool {
		log, err := b.c.Attempts(testCtx(t), in.ID)
		return err == nil && len(log) == 1 && !log[0].FinishedAt.IsZero()
	}, "first attempt logged, sleeping before the second")
	cancel()
	require.NoError(t, <-runDone)
	<-done
	log, err := b.c.Attempts(testCtx(t), in.ID)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, http.StatusServiceUnavailable, log[0].Status, "the finished attempt's status is kept")
	require.EqualValues(t, 1, calls.Load())
}
