package sqlitestore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// errInjected is the failure faultConnector gives the statements it is
// armed to fail.
var errInjected = errors.New("injected driver failure")

// faultConnector opens real modernc.org/sqlite connections on a file and
// wraps each one at the database/sql driver edge, so that a test can fail,
// on demand, the statements whose text starts with a prefix, before they
// reach SQLite. It counts the connections closed, which is how a test sees
// that the pool discarded one.
type faultConnector struct {
	drv driver.Driver
	dsn string

	mu     sync.Mutex
	failOn []string // statement prefixes to fail, each once

	closed atomic.Int64
}

func newFaultConnector(t *testing.T) *faultConnector {
	t.Helper()
	// A pool of the registered driver, only to reach the driver itself.
	reg, err := sql.Open("sqlite", ":memory:")
	require.NoError(t, err)
	drv := reg.Driver()
	require.NoError(t, reg.Close())
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	path := filepath.Join(t.TempDir(), "idem.db")
	return &faultConnector{drv: drv, dsn: "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()}
}

// fail arms the connector to fail the next statement starting with prefix.
func (c *faultConnector) fail(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failOn = append(c.failOn, prefix)
}

func (c *faultConnector) injected(query string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.failOn {
		if strings.HasPrefix(query, p) {
			c.failOn = append(c.failOn[:i], c.failOn[i+1:]...)
			return errInjected
		}
	}
	return nil
}

func (c *faultConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: conn, c: c}, nil
}

func (c *faultConnector) Driver() driver.Driver { return c.drv }

// faultConn forwards to the modernc connection, failing armed statements.
type faultConn struct {
	driver.Conn
	c *faultConnector
}

func (f *faultConn) Close() error {
	f.c.closed.Add(1)
	return f.Conn.Close()
}

func (f *faultConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := f.c.injected(query); err != nil {
		return nil, err
	}
	return f.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (f *faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := f.c.injected(query); err != nil {
		return nil, err
	}
	return f.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (f *faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := f.c.injected(query); err != nil {
		return nil, err
	}
	return f.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (f *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := f.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &faultTx{Tx: tx, c: f.c}, nil
}

// faultTx fails an armed "COMMIT" or "ROLLBACK" before it reaches SQLite,
// leaving the transaction open.
type faultTx struct {
	driver.Tx
	c *faultConnector
}

func (f *faultTx) Commit() error {
	if err := f.c.injected("COMMIT"); err != nil {
		return err
	}
	return f.Tx.Commit()
}

func (f *faultTx) Rollback() error {
	if err := f.c.injected("ROLLBACK"); err != nil {
		return err
	}
	return f.Tx.Rollback()
}

func (f *faultConn) ResetSession(ctx context.Context) error {
	return f.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (f *faultConn) IsValid() bool { return f.Conn.(driver.Validator).IsValid() }

// logRecords is a slog.Handler keeping the records it is given.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }

func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// errorsLogged returns the "error" attributes of the records at level.
func (h *logRecords) errorsLogged(level slog.Level) []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, r := range h.recs {
		if r.Level != level {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" {
				errs = append(errs, err)
			}
			return true
		})
	}
	return errs
}

// faultStore is a migrated SQLite store on a one-connection pool of
// faultConnector, so that a connection returned to the pool is the one the
// next call gets.
func faultStore(t *testing.T) (context.Context, *faultConnector, *sql.DB, *sqlitestore.Store, *logRecords) {
	t.Helper()
	fc := newFaultConnector(t)
	db := sql.OpenDB(fc)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	logs := &logRecords{}
	store, err := sqlitestore.New(db, &sqlitestore.Config{Logger: slog.New(logs)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, store.Migrate(ctx))
	return ctx, fc, db, store, logs
}

func cleanupClaim(key string, now time.Time) server.ClaimRequest {
	return server.ClaimRequest{
		Scope:       server.Scope{Principal: "p", Endpoint: "POST /payments", Key: key},
		Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute),
	}
}

// A transaction whose connection cannot get its busy_timeout back commits
// all the same, the failure is logged with its cause, and the connection,
// still carrying the transaction's short busy_timeout, is closed instead of
// going back to the pool.
func TestSQLiteStore_BusyTimeoutRestoreFailureIsLogged(t *testing.T) {
	t.Parallel()
	ctx, fc, db, store, logs := faultStore(t)
	closedBefore := fc.closed.Load()

	tx, err := store.BeginTx(ctx, 7*time.Millisecond)
	require.NoError(t, err)
	now := time.Now()
	res, err := tx.Claim(ctx, cleanupClaim("k", now))
	require.NoError(t, err)
	require.True(t, res.Acquired)
	fc.fail("PRAGMA busy_timeout =")
	require.NoError(t, tx.Commit(ctx), "the commit happened; a failed tidy-up must not turn it into an error")

	logged := logs.errorsLogged(slog.LevelWarn)
	require.Len(t, logged, 1)
	require.ErrorIs(t, logged[0], errInjected)
	require.Equal(t, closedBefore+1, fc.closed.Load(), "the connection must be discarded")

	var busy int64
	require.NoError(t, db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy))
	require.EqualValues(t, 5000, busy, "the pool must not hand out the connection with the transaction's busy_timeout")
	rec, err := store.Get(ctx, cleanupClaim("k", now).Scope, now)
	require.NoError(t, err)
	require.Equal(t, res.Token, rec.Token)
}

// A claim that fails and then cannot roll back returns both failures, and
// the connection, still inside its transaction, is closed instead of going
// back to the pool: the next claim works.
func TestSQLiteStore_ClaimRollbackFailureIsReported(t *testing.T) {
	t.Parallel()
	ctx, fc, _, store, _ := faultStore(t)
	closedBefore := fc.closed.Load()

	now := time.Now()
	fc.fail("INSERT INTO idempotency_keys")
	fc.fail("ROLLBACK")
	_, err := store.Claim(ctx, cleanupClaim("k", now))
	require.ErrorIs(t, err, errInjected)
	require.ErrorContains(t, err, "roll back a failed claim")
	require.Equal(t, closedBefore+1, fc.closed.Load(), "the connection must be discarded")

	res, err := store.Claim(ctx, cleanupClaim("k", now))
	require.NoError(t, err, "the next claim must get a fresh connection, not one inside a transaction")
	require.True(t, res.Acquired)
}

// A transaction that cannot roll back reports it, and its connection, still
// inside the transaction and holding the write lock, is closed instead of
// going back to the pool: the next claim works.
func TestSQLiteStore_TxRollbackFailureIsReported(t *testing.T) {
	t.Parallel()
	ctx, fc, _, store, logs := faultStore(t)
	closedBefore := fc.closed.Load()

	now := time.Now()
	tx, err := store.BeginTx(ctx, time.Second)
	require.NoError(t, err)
	res, err := tx.Claim(ctx, cleanupClaim("k", now))
	require.NoError(t, err)
	require.True(t, res.Acquired)
	fc.fail("ROLLBACK")
	require.ErrorIs(t, tx.Rollback(ctx), errInjected)
	require.Equal(t, closedBefore+1, fc.closed.Load(), "the connection must be discarded")
	require.Empty(t, logs.errorsLogged(slog.LevelWarn), "a discarded connection needs no tidy-up to fail")

	res, err = store.Claim(ctx, cleanupClaim("k", now))
	require.NoError(t, err, "the next claim must get a fresh connection, not one inside a transaction")
	require.True(t, res.Acquired, "the failed transaction's claim must not have been kept")
}
