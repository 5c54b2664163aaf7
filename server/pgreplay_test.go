package server

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
)

// A claim that meets a completed record only reads it: inside a transaction
// it leaves no transaction id assigned (it wrote nothing, not even a row
// lock), so in lease mode a replay commits nothing and waits for no flush.
func TestPostgresClaim_ReplayOfCompletedRecordWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := migratedPostgresStore(t)
	pool := store.Pool()

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

// The completion of a claim rewrites only columns no index covers, so
// PostgreSQL updates the row in place on its page (a HOT update) instead of
// writing a new entry in every index.
func TestPostgresComplete_IsHeapOnlyUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := migratedPostgresStore(t)

	tx, err := store.BeginTx(ctx, 0)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	const n = 100
	body := []byte(`{"id":"pay_0123456789abcdef","amount":1000,"currency":"EUR","status":"succeeded"}`)
	for i := range n {
		now := time.Now()
		req := ClaimRequest{
			Scope:              Scope{Principal: "p", Endpoint: "POST /pay", Key: fmt.Sprintf("key-%03d", i)},
			Fingerprint:        make([]byte, 32),
			FingerprintVersion: 1,
			Now:                now,
			LockedUntil:        now.Add(time.Minute),
			ExpiresAt:          now.Add(24 * time.Hour),
		}
		res, err := tx.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, res.Acquired)
		resp := &StoredResponse{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
		require.NoError(t, tx.Complete(ctx, req.Scope, res.Token, now, resp))
	}
	var updates, hot int
	require.NoError(t, tx.Handle().(pgx.Tx).QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
		WHERE schemaname = current_schema() AND relname = 'idempotency_keys'`).Scan(&updates, &hot))
	require.Equal(t, n, updates)
	t.Logf("%d of %d completions HOT", hot, updates)
	require.GreaterOrEqual(t, hot, n*9/10, "HOT completions")
}

// migratedPostgresStore is a store on the database's clock over a fresh
// schema.
func migratedPostgresStore(t *testing.T) *PostgresStore {
	t.Helper()
	store, err := NewPostgresStore(testpg.Pool(t), nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	return store
}
