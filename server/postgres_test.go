package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/storetest"
)

type postgresBundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	store *server.PostgresStore
}

// setupPostgres returns a migrated store on a fresh schema, with a sweep
// chunk small enough that the conformance suite's Sweep spans several chunks.
func setupPostgres(t testing.TB) *postgresBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pool := testpg.Pool(t)
	store, err := server.NewPostgresStore(pool, &server.PostgresConfig{SweepChunkSize: 3})
	require.NoError(t, err)
	store = server.WithCallerClock(store)
	require.NoError(t, store.Migrate(ctx))
	return &postgresBundle{ctx: ctx, pool: pool, store: store}
}

func TestPostgresStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) server.Store { return setupPostgres(t).store })
}

func TestPostgresStore_MigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	b := setupPostgres(t)
	require.NoError(t, b.store.Migrate(b.ctx), "second Migrate")

	// Several processes' worth of pools migrating one new schema at once.
	dsn := testpg.SchemaDSN(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgxpool.New(b.ctx, dsn)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			store, err := server.NewPostgresStore(pool, nil)
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = store.Migrate(b.ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "Migrate %d", i)
	}
	pool, err := pgxpool.New(b.ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	var count, version int
	require.NoError(t, pool.QueryRow(b.ctx, "SELECT count(*), max(version) FROM idempotency_migrations").Scan(&count, &version))
	require.Equal(t, 2, count, "each migration is recorded once")
	require.Equal(t, 2, version)

	var indexes int
	require.NoError(t, pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_indexes
		WHERE schemaname = current_schema() AND tablename = 'idempotency_keys'
		AND indexname <> 'idempotency_keys_pkey'`).Scan(&indexes))
	require.Equal(t, 1, indexes, "the expiry index only: the completion must stay a HOT update")
}

func TestNewPostgresStore_Validate(t *testing.T) {
	t.Parallel()
	_, err := server.NewPostgresStore(nil, nil)
	require.ErrorContains(t, err, "pool is nil")

	cfg := (*server.PostgresConfig)(nil).WithDefaults()
	require.Equal(t, server.SweepChunkSizeDefault, cfg.SweepChunkSize)
	require.Equal(t, server.PostgresLockTimeoutDefault, cfg.LockTimeout)

	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable")
	require.NoError(t, err)
	defer pool.Close()
	_, err = server.NewPostgresStore(pool, &server.PostgresConfig{SweepChunkSize: -1})
	require.ErrorContains(t, err, "SweepChunkSize")
	_, err = server.NewPostgresStore(pool, &server.PostgresConfig{LockTimeout: -time.Second})
	require.ErrorContains(t, err, "LockTimeout")
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

	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "POST /payments", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
	res, err := tx.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	_, err = pgTx.Exec(b.ctx, "INSERT INTO payments (amount) VALUES (4000)")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	_, err = b.store.Get(b.ctx, sc, now)
	require.ErrorIs(t, err, server.ErrNotFound)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT count(*) FROM payments").Scan(&n))
	require.Equal(t, 0, n, "the effect rolled back with the claim")

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
	store, err := server.NewPostgresStore(pool, nil)
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
	testStats(t, b.ctx, b.store)
}

func TestSQLiteStore_Stats(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	testStats(t, b.ctx, b.store)
}

type statser interface {
	server.Store
	Stats(ctx context.Context, now time.Time) (server.StoreStats, error)
}

func testStats(t *testing.T, ctx context.Context, store statser) {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	st, err := store.Stats(ctx, t0)
	require.NoError(t, err)
	require.Equal(t, server.StoreStats{}, st)

	claim := func(key string, now time.Time, window time.Duration) int64 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
			ExpiresAt: now.Add(window), LockedUntil: now.Add(time.Second),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Token
	}
	claim("expired", t0, time.Minute)
	claim("oldest-live", t0.Add(time.Second), time.Hour)
	token := claim("completed", t0.Add(2*time.Second), time.Hour)
	require.NoError(t, store.Complete(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: "completed"}, token, t0.Add(2*time.Second),
		&server.StoredResponse{Status: 200}))
	claim("in-progress", t0.Add(3*time.Second), time.Hour)

	st, err = store.Stats(ctx, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Rows)
	require.Equal(t, int64(1), st.Expired)
	require.Equal(t, int64(2), st.InProgress)
	require.True(t, t0.Add(time.Second).Equal(st.OldestCreatedAt), "OldestCreatedAt: got %v", st.OldestCreatedAt)
}
