package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/storetest"
)

type postgresBundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *pgstore.Store
}

// setupPostgres returns a migrated store on a fresh schema, with a sweep
// chunk small enough that the conformance suite's Sweep spans several chunks.
func setupPostgres(t testing.TB) *postgresBundle {
	t.Helper()
	b := &postgresBundle{ctx: storetest.Context(t), pool: testpg.Pool(t)}
	store, err := pgstore.New(b.pool, &pgstore.Config{SweepChunkSize: 3})
	require.NoError(t, err)
	b.store = pgstore.WithCallerClock(store)
	require.NoError(t, b.store.Migrate(b.ctx))
	return b
}

func TestPostgresStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) server.Store { return setupPostgres(t).store })
}

func TestPostgresStore_MigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	dsn := testpg.SchemaDSN(t)
	pool, err := pgxpool.New(b.ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	storetest.RunMigrations(t, b.ctx, b.store, 6, func(ctx context.Context) (storetest.Migrator, func(), error) {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		store, err := pgstore.New(pool, nil)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return store, pool.Close, nil
	}, func(ctx context.Context) (count, version int, err error) {
		err = pool.QueryRow(ctx, "SELECT count(*), max(version) FROM idempotency_migrations").Scan(&count, &version)
		return count, version, err
	}, 3)

	var indexes int
	require.NoError(t, pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'idempotency_keys'
		AND indexname <> 'idempotency_keys_pkey'`).Scan(&indexes))
	require.Equal(t, 1, indexes, "the expiry index only: the completion must stay a HOT update")
}

func TestNewPostgresStore_Validate(t *testing.T) {
	t.Parallel()
	_, err := pgstore.New(nil, nil)
	require.ErrorContains(t, err, "pool is nil")

	cfg := (*pgstore.Config)(nil).WithDefaults()
	require.Equal(t, 200, cfg.SweepChunkSize)
	require.Equal(t, 30*time.Second, cfg.StatementTimeout)
	require.Equal(t, 60*time.Second, cfg.IdleInTransactionTimeout)

	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable")
	require.NoError(t, err)
	defer pool.Close()
	_, err = pgstore.New(pool, &pgstore.Config{SweepChunkSize: -1})
	require.ErrorContains(t, err, "SweepChunkSize")
	_, err = pgstore.New(pool, &pgstore.Config{StatementTimeout: -time.Second})
	require.ErrorContains(t, err, "StatementTimeout")
	_, err = pgstore.New(pool, &pgstore.Config{IdleInTransactionTimeout: -time.Second})
	require.ErrorContains(t, err, "IdleInTransactionTimeout")
}

func TestPostgresStore_TxHandleIsPgxTx(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	_, err := b.pool.Exec(b.ctx, "CREATE TABLE payments (id bigserial PRIMARY KEY, amount bigint NOT NULL)")
	require.NoError(t, err)

	tx, err := b.store.BeginTx(b.ctx, storetest.LockTimeout)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	pgTx, ok := tx.Handle().(pgx.Tx)
	require.True(t, ok, "Handle: got %T want pgx.Tx", tx.Handle())

	var lockTimeout, statementTimeout, idleTimeout string
	require.NoError(t, pgTx.QueryRow(b.ctx, "SHOW lock_timeout").Scan(&lockTimeout))
	require.Equal(t, "200ms", lockTimeout)
	require.NoError(t, pgTx.QueryRow(b.ctx, "SHOW statement_timeout").Scan(&statementTimeout))
	require.Equal(t, "30s", statementTimeout, "a statement of the transaction cannot hang forever")
	require.NoError(t, pgTx.QueryRow(b.ctx, "SHOW idle_in_transaction_session_timeout").Scan(&idleTimeout))
	require.Equal(t, "1min", idleTimeout, "a transaction left idle is ended by PostgreSQL")

	require.NoError(t, tx.Rollback(b.ctx))

	// The same timeouts when the claim is the transaction's first statement
	// (it sets them itself, in the round trip of the BEGIN).
	tx, err = b.store.BeginTx(b.ctx, storetest.LockTimeout)
	require.NoError(t, err)
	now := time.Now()
	res, err := tx.Claim(b.ctx, server.ClaimRequest{Scope: server.Scope{Principal: "p", Endpoint: "POST /pay", Key: "timeouts"},
		Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	pgTx = tx.Handle().(pgx.Tx)
	require.NoError(t, pgTx.QueryRow(b.ctx, "SHOW lock_timeout").Scan(&lockTimeout))
	require.Equal(t, "200ms", lockTimeout)
	require.NoError(t, pgTx.QueryRow(b.ctx, "SHOW statement_timeout").Scan(&statementTimeout))
	require.Equal(t, "30s", statementTimeout)
	require.NoError(t, pgTx.QueryRow(b.ctx, "SHOW idle_in_transaction_session_timeout").Scan(&idleTimeout))
	require.Equal(t, "1min", idleTimeout)
	require.NoError(t, tx.Rollback(b.ctx))

	storetest.RunTxEffectRollsBack(t, b.ctx, b.store, func(ctx context.Context, handle any) error {
		_, err := handle.(pgx.Tx).Exec(ctx, "INSERT INTO payments (amount) VALUES (4000)")
		return err
	}, func(t *testing.T) {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT count(*) FROM payments").Scan(&n))
		require.Equal(t, 0, n, "the effect rolled back with the claim")
	})

	// lock_timeout was local to the transaction.
	require.NoError(t, b.pool.QueryRow(b.ctx, "SHOW lock_timeout").Scan(&lockTimeout))
	require.Equal(t, "0", lockTimeout)
}

func TestPostgresStore_Unreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Nothing listens on port 1.
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	defer pool.Close()
	store, err := pgstore.New(pool, nil)
	require.NoError(t, err)

	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "POST /payments", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
	resp := &server.StoredResponse{Status: 201}

	_, err = store.Claim(ctx, req)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.ErrorContains(t, err, "127.0.0.1", "the cause stays visible")
	_, err = store.Get(ctx, sc, now)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.ErrorIs(t, store.Complete(ctx, sc, 1, now, resp), server.ErrStoreUnavailable)
	require.ErrorIs(t, store.Release(ctx, sc, 1), server.ErrStoreUnavailable)
	require.ErrorIs(t, store.ExtendLease(ctx, sc, 1, now, time.Second), server.ErrStoreUnavailable)
	_, err = store.Sweep(ctx, now)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	_, err = store.BeginTx(ctx, time.Second)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.ErrorIs(t, store.Migrate(ctx), server.ErrStoreUnavailable)
	_, err = store.Stats(ctx, now)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
}

func TestPostgresStore_ResponseBodyIsBytea(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	var typ string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT data_type FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'idempotency_keys' AND column_name = 'response_body'`).Scan(&typ))
	require.Equal(t, "bytea", typ)
}

func TestPostgresStore_Stats(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	storetest.RunStats(t, b.ctx, b.store)
}

func TestPostgresStore_Health(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	storetest.RunHealth(t, b.ctx, b.store)
}

// PoolStats reports the pool's bound and the connections in use.
func TestPostgresStore_PoolStats(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	st := b.store.PoolStats()
	conn.Release()
	require.Equal(t, int64(b.pool.Config().MaxConns), st.MaxConns)
	require.Equal(t, int64(1), st.InUse)
}

func TestPostgresStore_InFlight(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	storetest.RunInFlight(t, b.ctx, b.store)
}
