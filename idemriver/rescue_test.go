package idemriver_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
)

// A job left running by a worker that died (River's fetch recorded the run,
// no result was ever recorded) is rescued after the lease and sent again
// with the same key; the dead run counts as an attempt whose answer was
// lost, so a 401 after it ends the intent outcome-unknown, not failed, and
// the horizon counts from the dead run's start.
func TestClient_RescueDeadWorker(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	var key atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		key.Store(r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(api.Close)
	b := setup(t, &idemriver.Config{LeaseDuration: 2 * time.Second, AttemptTimeout: time.Second, Window: time.Hour, SafetyMargin: time.Minute})
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL + "/charges", Body: []byte(`{}`)})
	require.NoError(t, err)

	// What a worker that fetched the job as it was created and died leaves
	// behind. Either rescuer may take it over first: idemkit's records the
	// dead run's start (attempted_at) in its error, River's records only
	// its own time, and then the start is taken from the job's creation —
	// the same instant here, so both give the dead run's start.
	deadStart := time.Now().Add(-10 * time.Second).Truncate(time.Millisecond)
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = $2, created_at = $2,
		attempted_by = ARRAY['dead-worker'] WHERE id = $1`, in.JobID, deadStart)
	require.NoError(t, err)
	got, err := b.client.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, idemriver.StatePending, got.State)
	require.Equal(t, 1, got.Attempts, "the run River recorded counts as an attempt while in flight")

	b.start(t)
	got, err = b.client.Wait(ctx, in.ID)
	require.ErrorIs(t, err, idemriver.StateUnknown, "last error: %s", got.LastError)
	require.Equal(t, 2, got.Attempts, "the dead run and the takeover's")
	require.Equal(t, 1, got.Unanswered)
	require.EqualValues(t, 1, hits.Load())
	require.Equal(t, in.Key, key.Load())
	require.Equal(t, http.StatusUnauthorized, got.Outcome.Status)
	require.WithinDuration(t, deadStart, got.FirstAttemptAt, time.Millisecond, "the first attempt is the dead run's")
	require.WithinDuration(t, deadStart.Add(time.Hour-time.Minute), got.Horizon, time.Millisecond)
}
