package idemriver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
)

// A Retry-After is a River snooze: the job is scheduled for then, River's
// attempt counter is given back (snoozes never exhaust River's MaxAttempts),
// and the intent is pending with the server's reason as its last error.
func TestClient_RetryAfterIsASnooze(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(api.Close)
	b := setup(t, nil)
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL})
	require.NoError(t, err)
	before := time.Now()
	b.start(t)

	var state string
	var attempt int
	var scheduled time.Time
	require.Eventually(t, func() bool {
		err := b.pool.QueryRow(ctx, `SELECT state::text, attempt, scheduled_at FROM river_job WHERE id = $1`, in.JobID).Scan(&state, &attempt, &scheduled)
		return err == nil && state == "scheduled"
	}, 30*time.Second, 20*time.Millisecond, "the job is snoozed")
	require.Zero(t, attempt, "a snooze gives River's attempt back")
	require.False(t, scheduled.Before(before.Add(60*time.Second)), "scheduled at %v, Retry-After asked for 60 s", scheduled)
	got, err := b.client.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, idemriver.StatePending, got.State)
	require.Equal(t, 1, got.Attempts)
	require.True(t, strings.Contains(got.LastError, "429"), "last error %q", got.LastError)
	require.WithinDuration(t, scheduled, got.NextAttemptAt, time.Millisecond)
	require.EqualValues(t, 1, hits.Load())
}

// OmitOutcomeBody keeps the status and the replay marker only.
func TestClient_OmitOutcomeBody(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"receipt":"rcpt-s3cr3t"}`))
	}))
	t.Cleanup(api.Close)
	b := setup(t, &idemriver.Config{OmitOutcomeBody: true})
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL})
	require.NoError(t, err)
	b.start(t)
	got, err := b.client.Wait(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, &idemriver.Outcome{Status: http.StatusCreated, Replayed: true}, got.Outcome)
	var rows string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT string_agg(to_jsonb(j)::text, '') FROM river_job j`).Scan(&rows))
	require.NotContains(t, rows, "rcpt-s3cr3t")
	var hasBody bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT metadata->'output' ? 'body' FROM river_job WHERE id = $1`, in.JobID).Scan(&hasBody))
	require.False(t, hasBody, "no body in the stored outcome, not even encoded")
}
