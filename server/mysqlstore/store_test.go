package mysqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/mysqlstore"
	"github.com/idemkit/idemkit/server/storetest"
)

type mysqlBundle struct {
	ctx   context.Context
	db    *sql.DB
	store *mysqlstore.Store
}

// setupMySQL returns a migrated store on a fresh database, deciding by the
// caller's clock, with a sweep chunk small enough that the conformance
// suite's Sweep spans several chunks.
func setupMySQL(t testing.TB) *mysqlBundle {
	t.Helper()
	b := &mysqlBundle{ctx: storetest.Context(t), db: testmysql.DB(t)}
	store, err := mysqlstore.New(b.db, &mysqlstore.Config{SweepChunkSize: 3})
	require.NoError(t, err)
	b.store = mysqlstore.WithCallerClock(store)
	require.NoError(t, b.store.Migrate(b.ctx))
	return b
}

func TestMySQLStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) server.Store { return setupMySQL(t).store })
}

func TestMySQLStore_Stats(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	storetest.RunStats(t, b.ctx, b.store)
}

func TestMySQLStore_MigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	cfg := testmysql.DatabaseConfig(t)
	pool := openPool(t, cfg)
	first, err := mysqlstore.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, first.Migrate(b.ctx))
	storetest.RunMigrations(t, b.ctx, first, 4, func(ctx context.Context) (storetest.Migrator, func(), error) {
		db := openPool(t, cfg)
		store, err := mysqlstore.New(db, nil)
		if err != nil {
			_ = db.Close()
			return nil, nil, err
		}
		return store, func() { _ = db.Close() }, nil
	}, func(ctx context.Context) (count, version int, err error) {
		err = pool.QueryRowContext(ctx, "SELECT count(*), max(version) FROM idempotency_migrations").Scan(&count, &version)
		return count, version, err
	}, 1)
}

// openPool opens a small pool on cfg, closed when the test ends.
func openPool(t testing.TB, cfg *mysql.Config) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestNewMySQLStore_Validate(t *testing.T) {
	t.Parallel()
	_, err := mysqlstore.New(nil, nil)
	require.ErrorContains(t, err, "db is nil")
	cfg := (*mysqlstore.Config)(nil).WithDefaults()
	require.Equal(t, 200, cfg.SweepChunkSize)
	require.Equal(t, 30*time.Second, cfg.StatementTimeout)
	require.Equal(t, 60*time.Second, cfg.IdleInTransactionTimeout)
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none")
	require.NoError(t, err)
	defer db.Close()
	_, err = mysqlstore.New(db, &mysqlstore.Config{SweepChunkSize: -1})
	require.ErrorContains(t, err, "SweepChunkSize")
	_, err = mysqlstore.New(db, &mysqlstore.Config{IdleInTransactionTimeout: -time.Second})
	require.ErrorContains(t, err, "IdleInTransactionTimeout")
}

// Keys, principals and endpoints are compared byte for byte: not by case,
// and not with PAD SPACE, under which utf8mb4_bin holds 'k' and 'k ' to be
// one key.
func TestMySQLStore_ScopesAreBytes(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	now := time.Now()
	claim := func(sc server.Scope) server.ClaimResult {
		t.Helper()
		res, err := b.store.Claim(b.ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
			Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)})
		require.NoError(t, err)
		return res
	}
	for _, sc := range []server.Scope{
		{Principal: "p", Endpoint: "e", Key: "k"},
		{Principal: "p", Endpoint: "e", Key: "K"},
		{Principal: "p", Endpoint: "e", Key: "k "},
		{Principal: "p", Endpoint: "e", Key: "k\t"},
		{Principal: "P", Endpoint: "e", Key: "k"},
		{Principal: "p ", Endpoint: "e", Key: "k"},
		{Principal: "p", Endpoint: "E", Key: "k"},
		{Principal: "p", Endpoint: "e", Key: "é"},
		{Principal: "p", Endpoint: "e", Key: "e\u0301"},
		{Principal: "p", Endpoint: "e", Key: "🔑"},
		{Principal: "p", Endpoint: "e", Key: "k\x00"},
		{Principal: "p", Endpoint: "e", Key: "\xff\xfe"},
		{Principal: "p", Endpoint: "e", Key: strings.Repeat("x", 255)},
		{Principal: strings.Repeat("p", 512), Endpoint: strings.Repeat("e", 512), Key: "k"},
	} {
		res := claim(sc)
		require.True(t, res.Acquired, "scope %q/%q/%q must be its own", sc.Principal, sc.Endpoint, sc.Key)
		rec, err := b.store.Get(b.ctx, sc, now)
		require.NoError(t, err)
		require.Equal(t, sc, rec.Scope, "read back byte for byte")
	}
}

// A scope part longer than its column is refused before it is sent: a
// server without STRICT_TRANS_TABLES would truncate it and merge two
// scopes.
func TestMySQLStore_OverlongScopeRefused(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	_, err := b.db.ExecContext(b.ctx, "SET SESSION sql_mode = ''")
	require.NoError(t, err)
	now := time.Now()
	for _, sc := range []server.Scope{
		{Principal: "p", Endpoint: "e", Key: strings.Repeat("k", 256)},
		{Principal: strings.Repeat("p", 513), Endpoint: "e", Key: "k"},
		{Principal: "p", Endpoint: strings.Repeat("e", 513), Key: "k"},
	} {
		_, err := b.store.Claim(b.ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
			Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)})
		require.ErrorContains(t, err, "over the")
	}
	var n int
	require.NoError(t, b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM idempotency_keys").Scan(&n))
	require.Zero(t, n)
}

func TestMySQLStore_TxHandleIsSQLTx(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	_, err := b.db.ExecContext(b.ctx, "CREATE TABLE payments (id BIGINT AUTO_INCREMENT PRIMARY KEY, amount BIGINT NOT NULL) ENGINE = InnoDB")
	require.NoError(t, err)

	tx, err := b.store.BeginTx(b.ctx, 1500*time.Millisecond)
	require.NoError(t, err)
	sqlTx, ok := tx.Handle().(*sql.Tx)
	require.True(t, ok, "Handle: got %T want *sql.Tx", tx.Handle())
	var (
		lockWait, idle int
		stmt           float64
	)
	require.NoError(t, sqlTx.QueryRowContext(b.ctx, "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.max_statement_time, @@SESSION.idle_transaction_timeout").
		Scan(&lockWait, &stmt, &idle))
	require.Equal(t, 2, lockWait, "the lock timeout in whole seconds, rounded up")
	require.Equal(t, 30.0, stmt, "a statement of the transaction cannot run forever (MariaDB)")
	require.Equal(t, 60, idle, "a transaction left idle is ended by MariaDB")
	require.NoError(t, tx.Rollback(b.ctx))

	storetest.RunTxEffectRollsBack(t, b.ctx, b.store, func(ctx context.Context, handle any) error {
		_, err := handle.(*sql.Tx).ExecContext(ctx, "INSERT INTO payments (amount) VALUES (4000)")
		return err
	}, func(t *testing.T) {
		var n int
		require.NoError(t, b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM payments").Scan(&n))
		require.Equal(t, 0, n, "the effect rolled back with the claim")
	})

	// innodb_lock_wait_timeout was restored on every pooled connection.
	conns := make([]*sql.Conn, testmysql.MaxOpenConns)
	for i := range conns {
		c, err := b.db.Conn(b.ctx)
		require.NoError(t, err)
		conns[i] = c
		var v, global, idle, idleGlobal int
		var stmt, stmtGlobal float64
		require.NoError(t, c.QueryRowContext(b.ctx, "SELECT @@SESSION.innodb_lock_wait_timeout, @@GLOBAL.innodb_lock_wait_timeout,"+
			" @@SESSION.max_statement_time, @@GLOBAL.max_statement_time, @@SESSION.idle_transaction_timeout, @@GLOBAL.idle_transaction_timeout").
			Scan(&v, &global, &stmt, &stmtGlobal, &idle, &idleGlobal))
		require.Equal(t, global, v, "connection %d", i)
		require.Equal(t, stmtGlobal, stmt, "connection %d", i)
		require.Equal(t, idleGlobal, idle, "connection %d", i)
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
}

func TestMySQLStore_Unreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Nothing listens on port 1.
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/test?timeout=1s")
	require.NoError(t, err)
	defer db.Close()
	store, err := mysqlstore.New(db, nil)
	require.NoError(t, err)

	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "POST /payments", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
	_, err = store.Claim(ctx, req)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.ErrorContains(t, err, "127.0.0.1", "the cause stays visible")
	_, err = store.Get(ctx, sc, now)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.ErrorIs(t, store.Complete(ctx, sc, 1, now, &server.StoredResponse{Status: 201}), server.ErrStoreUnavailable)
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

func TestMySQLStore_InFlight(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	storetest.RunInFlight(t, b.ctx, b.store)
}
