package server_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/storetest"
)

type sqliteBundle struct {
	ctx   context.Context
	path  string
	db    *sql.DB
	store *server.SQLiteStore
}

// setupSQLite returns a migrated store on a fresh file, with a sweep chunk
// small enough that the conformance suite's Sweep spans several chunks.
func setupSQLite(t testing.TB) *sqliteBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := server.OpenSQLite(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := server.NewSQLiteStore(db, &server.SQLiteConfig{SweepChunkSize: 3})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	return &sqliteBundle{ctx: ctx, path: path, db: db, store: store}
}

func TestSQLiteStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) server.Store { return setupSQLite(t).store })
}

func TestSQLiteStore_MigrateTwiceAndConcurrently(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	require.NoError(t, b.store.Migrate(b.ctx), "second Migrate")

	// Several processes' worth of pools migrating one new file at once.
	path := filepath.Join(t.TempDir(), "race.db")
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := server.OpenSQLite(b.ctx, path)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			store, err := server.NewSQLiteStore(db, nil)
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
	db, err := server.OpenSQLite(b.ctx, path)
	require.NoError(t, err)
	defer db.Close()
	var count, version int
	require.NoError(t, db.QueryRowContext(b.ctx, "SELECT count(*), max(version) FROM idempotency_migrations").Scan(&count, &version))
	require.Equal(t, 1, count, "each migration is recorded once")
	require.Equal(t, 1, version)
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
	_, err := server.OpenSQLite(context.Background(), "")
	require.Error(t, err)
}

func TestNewSQLiteStore_Validate(t *testing.T) {
	t.Parallel()
	_, err := server.NewSQLiteStore(nil, nil)
	require.ErrorContains(t, err, "db is nil")
	b := setupSQLite(t)
	_, err = server.NewSQLiteStore(b.db, &server.SQLiteConfig{SweepChunkSize: -1})
	require.ErrorContains(t, err, "SweepChunkSize")
	_, err = server.NewSQLiteStore(b.db, &server.SQLiteConfig{BusyTimeout: -time.Second})
	require.ErrorContains(t, err, "BusyTimeout")

	cfg := (*server.SQLiteConfig)(nil).WithDefaults()
	require.Equal(t, server.SweepChunkSizeDefault, cfg.SweepChunkSize)
	require.Equal(t, server.SQLiteBusyTimeoutDefault, cfg.BusyTimeout)
}

func TestSQLiteStore_TxHandleIsSQLTx(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	tx, err := b.store.BeginTx(b.ctx, storetest.LockTimeout)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	sqlTx, ok := tx.Handle().(*sql.Tx)
	require.True(t, ok, "Handle: got %T want *sql.Tx", tx.Handle())

	// The handler's effect and the claim commit together.
	_, err = sqlTx.ExecContext(b.ctx, "CREATE TABLE payments (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL) STRICT")
	require.NoError(t, err)
	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "POST /payments", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
	res, err := tx.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	_, err = sqlTx.ExecContext(b.ctx, "INSERT INTO payments (amount) VALUES (4000)")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	_, err = b.store.Get(b.ctx, sc, now)
	require.ErrorIs(t, err, server.ErrNotFound)
	var n int
	require.Error(t, b.db.QueryRowContext(b.ctx, "SELECT count(*) FROM payments").Scan(&n), "the rolled-back table must not exist")
}

// holdWriteLock starts a write transaction on a second pool on the same file,
// as another process would, and returns a function that ends it.
func holdWriteLock(t *testing.T, b *sqliteBundle) func() {
	t.Helper()
	other, err := server.OpenSQLite(b.ctx, b.path)
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
		store, err := server.NewSQLiteStore(db, nil)
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
			db, err := server.OpenSQLite(ctx, path)
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

		db, err := server.OpenSQLite(ctx, b.path)
		if err != nil {
			t.Logf("OpenSQLite: %v", err)
			require.ErrorIs(t, err, server.ErrStoreUnavailable)
			return
		}
		defer db.Close()
		store, err := server.NewSQLiteStore(db, nil)
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
		db, err := server.OpenSQLite(ctx, path)
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
