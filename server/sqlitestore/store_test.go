package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/storetest"
)

type sqliteBundle struct {
	ctx   context.Context
	path  string
	db    *sql.DB
	store *sqlitestore.Store
}

// setupSQLite returns a migrated store on a fresh file, with a sweep chunk
// small enough that the conformance suite's Sweep spans several chunks.
func setupSQLite(t testing.TB) *sqliteBundle {
	t.Helper()
	ctx := storetest.Context(t)
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, &sqlitestore.Config{SweepChunkSize: 3})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	return &sqliteBundle{ctx: ctx, path: path, db: db, store: store}
}

func TestSQLiteStore_MigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	path := filepath.Join(t.TempDir(), "race.db") // one new file for several processes' worth of pools
	storetest.RunMigrations(t, b.ctx, b.store, 6, func(ctx context.Context) (storetest.Migrator, func(), error) {
		db, err := sqlitestore.Open(ctx, path)
		if err != nil {
			return nil, nil, err
		}
		store, err := sqlitestore.New(db, nil)
		if err != nil {
			return nil, nil, errors.Join(err, db.Close())
		}
		return store, func() { _ = db.Close() }, nil
	}, func(ctx context.Context) (count, version int, err error) {
		db, err := sqlitestore.Open(ctx, path)
		if err != nil {
			return 0, 0, err
		}
		defer db.Close()
		err = db.QueryRowContext(ctx, "SELECT count(*), max(version) FROM idempotency_migrations").Scan(&count, &version)
		return count, version, err
	}, 1)
}

func TestOpenSQLite_Pragmas(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	conn, err := b.db.Conn(b.ctx)
	require.NoError(t, err)
	defer conn.Close()
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
		"busy_timeout": "5000",
		"foreign_keys": "1",
	} {
		var got string
		require.NoError(t, conn.QueryRowContext(b.ctx, "PRAGMA "+pragma).Scan(&got))
		require.Equal(t, want, got, "PRAGMA %s", pragma)
	}
	var strict int
	require.NoError(t, conn.QueryRowContext(b.ctx, "SELECT strict FROM pragma_table_list WHERE name = 'idempotency_keys'").Scan(&strict))
	require.Equal(t, 1, strict, "idempotency_keys is a STRICT table")
}

func TestOpenSQLite_EmptyPath(t *testing.T) {
	t.Parallel()
	_, err := sqlitestore.Open(context.Background(), "")
	require.Error(t, err)
}

func TestNewSQLiteStore_Validate(t *testing.T) {
	t.Parallel()
	_, err := sqlitestore.New(nil, nil)
	require.ErrorContains(t, err, "db is nil")
	b := setupSQLite(t)
	_, err = sqlitestore.New(b.db, &sqlitestore.Config{SweepChunkSize: -1})
	require.ErrorContains(t, err, "SweepChunkSize")

	cfg := (*sqlitestore.Config)(nil).WithDefaults()
	require.Equal(t, 1000, cfg.SweepChunkSize)
	require.NotNil(t, cfg.Logger)
}

func TestSQLiteStore_TxHandleIsSQLTx(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	storetest.RunTxEffectRollsBack(t, b.ctx, b.store, func(ctx context.Context, handle any) error {
		sqlTx, ok := handle.(*sql.Tx)
		require.True(t, ok, "Handle: got %T want *sql.Tx", handle)
		// The handler's effect and the claim commit together.
		if _, err := sqlTx.ExecContext(ctx, "CREATE TABLE payments (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL) STRICT"); err != nil {
			return err
		}
		_, err := sqlTx.ExecContext(ctx, "INSERT INTO payments (amount) VALUES (4000)")
		return err
	}, func(t *testing.T) {
		var n int
		require.Error(t, b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM payments").Scan(&n), "the rolled-back table must not exist")
	})
}

// holdWriteLock starts a write transaction on a second pool on the same file,
// as another process would, and returns a function that ends it.
func holdWriteLock(t *testing.T, b *sqliteBundle) func() {
	t.Helper()
	other, err := sqlitestore.Open(b.ctx, b.path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(b.ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(b.ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, err = conn.ExecContext(b.ctx, "DELETE FROM idempotency_keys")
	require.NoError(t, err)
	var once sync.Once
	release := func() {
		once.Do(func() {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			_ = conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func TestSQLiteStore_BusyIsErrStoreBusy(t *testing.T) {
	t.Parallel()

	t.Run("TxClaim", func(t *testing.T) {
		t.Parallel()
		b := setupSQLite(t)
		release := holdWriteLock(t, b)

		tx, err := b.store.BeginTx(b.ctx, storetest.LockTimeout)
		require.NoError(t, err)
		defer tx.Rollback(b.ctx)
		now := time.Now()
		req := server.ClaimRequest{Scope: server.Scope{Principal: "p", Endpoint: "e", Key: "k"}, Fingerprint: []byte{1},
			FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
		_, err = tx.Claim(b.ctx, req)
		require.ErrorIs(t, err, server.ErrStoreBusy)
		require.NotErrorIs(t, err, server.ErrInFlight)
		require.NoError(t, tx.Rollback(b.ctx))

		// Once the other writer is gone, the same claim succeeds.
		release()
		tx2, err := b.store.BeginTx(b.ctx, storetest.LockTimeout)
		require.NoError(t, err)
		defer tx2.Rollback(b.ctx)
		res, err := tx2.Claim(b.ctx, req)
		require.NoError(t, err)
		require.True(t, res.Acquired)
		require.NoError(t, tx2.Commit(b.ctx))
	})

	t.Run("LeaseClaim", func(t *testing.T) {
		t.Parallel()
		b := setupSQLite(t)
		holdWriteLock(t, b)

		// A pool the user opened with a short busy_timeout.
		db, err := sql.Open("sqlite", "file:"+b.path+"?_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)")
		require.NoError(t, err)
		defer db.Close()
		store, err := sqlitestore.New(db, nil)
		require.NoError(t, err)
		now := time.Now()
		req := server.ClaimRequest{Scope: server.Scope{Principal: "p", Endpoint: "e", Key: "k"}, Fingerprint: []byte{1},
			FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
		_, err = store.Claim(b.ctx, req)
		require.ErrorIs(t, err, server.ErrStoreBusy)
		_, err = store.Sweep(b.ctx, now)
		require.ErrorIs(t, err, server.ErrStoreBusy)
	})
}

func TestSQLiteStore_CorruptFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NotADatabase", func(t *testing.T) {
		t.Parallel()
		for name, garbage := range map[string][]byte{
			"short": []byte("this is not a database\n"),
			"page":  bytesOf(4096, 0xA5),
		} {
			path := filepath.Join(t.TempDir(), name+".db")
			require.NoError(t, os.WriteFile(path, garbage, 0o600))
			db, err := sqlitestore.Open(ctx, path)
			require.Error(t, err, "%s: OpenSQLite of garbage must fail", name)
			require.Nil(t, db)
			require.ErrorIs(t, err, server.ErrStoreUnavailable, "%s", name)
			require.ErrorContains(t, err, path)
			require.ErrorContains(t, err, "not an SQLite database")
		}
	})

	t.Run("DamagedPages", func(t *testing.T) {
		t.Parallel()
		b := setupSQLite(t)
		now := time.Now()
		for i := range 200 {
			req := server.ClaimRequest{Scope: server.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprint(i)},
				Fingerprint: bytesOf(32, byte(i)), FingerprintVersion: 1, Now: now,
				ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
			_, err := b.store.Claim(b.ctx, req)
			require.NoError(t, err)
		}
		_, err := b.db.ExecContext(b.ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
		require.NoError(t, err)
		require.NoError(t, b.db.Close())

		// Keep the 100-byte header, destroy everything after it.
		f, err := os.OpenFile(b.path, os.O_WRONLY, 0)
		require.NoError(t, err)
		info, err := f.Stat()
		require.NoError(t, err)
		_, err = f.WriteAt(bytesOf(int(info.Size())-100, 0x5A), 100)
		require.NoError(t, err)
		require.NoError(t, f.Close())

		db, err := sqlitestore.Open(ctx, b.path)
		if err != nil {
			t.Logf("OpenSQLite: %v", err)
			require.ErrorIs(t, err, server.ErrStoreUnavailable)
			return
		}
		defer db.Close()
		store, err := sqlitestore.New(db, nil)
		require.NoError(t, err)
		err = store.Migrate(ctx)
		if err == nil {
			_, err = store.Get(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: "1"}, now)
		}
		t.Logf("Migrate/Get: %v", err)
		require.ErrorIs(t, err, server.ErrStoreUnavailable)
	})

	t.Run("Unopenable", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "missing-dir", "idem.db")
		db, err := sqlitestore.Open(ctx, path)
		require.Error(t, err)
		require.Nil(t, db)
		require.ErrorIs(t, err, server.ErrStoreUnavailable)
		require.ErrorContains(t, err, path)
	})
}

func bytesOf(n int, b byte) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestStore_Stats(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	storetest.RunStats(t, b.ctx, b.store)
}

func TestSQLiteStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) server.Store { return setupSQLite(t).store })
}

func TestStore_Health(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	storetest.RunHealth(t, b.ctx, b.store)
}

// PoolStats reports the *sql.DB's bound and the connections in use.
func TestStore_PoolStats(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	b.db.SetMaxOpenConns(7)
	conn, err := b.db.Conn(b.ctx)
	require.NoError(t, err)
	st := b.store.PoolStats()
	require.NoError(t, conn.Close())
	require.Equal(t, int64(7), st.MaxConns)
	require.Equal(t, int64(1), st.InUse)
}

func TestStore_InFlight(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	storetest.RunInFlight(t, b.ctx, b.store)
}
