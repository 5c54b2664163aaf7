package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
)

// A claim that meets a completed record only reads it: inside a transaction
// it leaves no transaction id assigned (it wrote nothing, not even a row
// lock), so in lease mode a replay commits nothing and waits for no flush.
func TestPostgresClaim_ReplayOfCompletedRecordWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testpg.Pool(t)
	store, err := NewPostgresStore(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	now := time.Now()
	req := ClaimRequest{
		Scope:              Scope{Principal: "p", Endpoint: "POST /pay", Key: "replayed"},
		Fingerprint:        []byte("fp"),
		FingerprintVersion: 1,
		Now:                now,
		LockedUntil:        now.Add(time.Minute),
		ExpiresAt:          now.Add(time.Hour),
	}
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.NoError(t, store.Complete(ctx, req.Scope, res.Token, now, &StoredResponse{Status: 201, Body: []byte("ok")}))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	again, err := pgClaimOn(ctx, tx, store.clock, req)
	require.NoError(t, err)
	require.False(t, again.Acquired)
	require.NotNil(t, again.Existing)
	require.Equal(t, StateCompleted, again.Existing.State)
	require.Equal(t, []byte("ok"), again.Existing.Response.Body)

	var xid *string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid))
	require.Nil(t, xid, "the replay's claim wrote (or locked) a row")
}
