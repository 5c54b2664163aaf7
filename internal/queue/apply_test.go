package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// queueOne inserts an intent due at now and returns it.
func queueOne(t *testing.T, q *Queue, id string, now time.Time) *Intent {
	t.Helper()
	res := q.InsertBatch(context.Background(), []context.Context{context.Background()}, []*NewIntent{{
		ID: id, Key: id, Method: "POST", URL: "http://127.0.0.1:1/x", Host: "http://127.0.0.1:1",
		Body: []byte("{}"), Fingerprint: []byte{1}, Now: now}})
	require.NoError(t, res[0].Err)
	return res[0].Intent
}

// TestApply_OneCallPerDecision: a decision is applied in one transaction:
// the attempt logged, the intent moved, the intents waiting for its host
// made due; a stale lease writes nothing.
func TestApply_OneCallPerDecision(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	queueOne(t, q, "a", now)
	waiting := queueOne(t, q, "b", now)
	_, err := q.MakeDue(ctx, []string{waiting.ID}, now) // nothing to do: due already
	require.NoError(t, err)

	// b waits an hour, released.
	clb, err := q.Claim(ctx, "b", now, time.Minute, nil)
	require.NoError(t, err)
	_, err = q.Apply(ctx, clb.Lease, now, Change{State: Pending, Due: now.Add(time.Hour), LastError: "status 503",
		Attempt: &AttemptLog{N: clb.Attempt, Status: 503}})
	require.NoError(t, err)

	cl, err := q.Claim(ctx, "a", now, time.Minute, nil)
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, 1, cl.Attempt)
	require.Equal(t, now.Add(24*time.Hour-time.Minute), cl.Horizon.At, "planned from the configured window and margin")

	synced := q.SyncedCommits.Load()
	applied, err := q.Apply(ctx, cl.Lease, now, Change{State: Succeeded, Outcome: &Outcome{Status: 201, Body: []byte("ok")},
		Attempt: &AttemptLog{N: 1, Status: 201}, Wake: []string{"b"}})
	require.NoError(t, err)
	require.Equal(t, 1, applied.Woken, "b is due again")
	require.Equal(t, synced, q.SyncedCommits.Load(), "an answered outcome is committed without an fsync")

	got, err := q.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, Succeeded, got.State)
	require.Equal(t, 201, got.Outcome.Status)
	b, err := q.Get(ctx, "b")
	require.NoError(t, err)
	require.False(t, b.NextAttemptAt.After(now), "b is due now")
	log, err := q.Attempts(ctx, "a")
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, 201, log[0].Status)

	// The lease is spent: a second decision under it changes nothing.
	_, err = q.Apply(ctx, cl.Lease, now, Change{State: Failed, LastError: "late"})
	require.ErrorIs(t, err, ErrLeaseLost)
	got, err = q.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, Succeeded, got.State)
}

// TestClaim_BudgetHoldsAndCounts: the claim holds an intent whose budget is
// spent, and gives the budget of the attempt it starts.
func TestClaim_BudgetHoldsAndCounts(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t)
	q.cfg.PerHour = 2
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	queueOne(t, q, "a", now)
	release := func(cl *Claimed, at time.Time) {
		_, err := q.Apply(ctx, cl.Lease, at, Change{State: Pending, Due: at, Attempt: &AttemptLog{N: cl.Attempt, Status: 503}})
		require.NoError(t, err)
	}
	cl, err := q.Claim(ctx, "a", now, time.Minute, nil)
	require.NoError(t, err)
	require.Equal(t, 2, cl.Budget.Max)
	require.True(t, cl.Budget.Oldest.IsZero(), "one attempt of two")
	release(cl, now)
	cl, err = q.Claim(ctx, "a", now.Add(time.Second), time.Minute, nil)
	require.NoError(t, err)
	require.Equal(t, now, cl.Budget.Oldest, "the second most recent attempt, this one counted")
	release(cl, now.Add(time.Second))
	cl, err = q.Claim(ctx, "a", now.Add(2*time.Second), time.Minute, nil)
	require.NoError(t, err)
	require.Nil(t, cl, "two attempts in the last hour: held")
	in, err := q.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, now.Add(time.Hour), in.NextAttemptAt)
	require.Contains(t, in.LastError, "2 attempts started in the last hour")
}
