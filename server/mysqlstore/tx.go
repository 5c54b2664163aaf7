package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// Tx returns the transaction of a transactional-mode request on a Store:
// the *sql.Tx on the store's pool. The handler writes its effect on it; the
// middleware stores the response in it and commits. The handler must not
// commit or roll it back.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	h, _ := server.TxHandle(ctx)
	tx, ok := h.(*sql.Tx)
	return tx, ok
}

const (
	// mySetLockWait saves the session's innodb_lock_wait_timeout and sets
	// the transaction's (%d: whole seconds).
	mySetLockWait = "SET @idemkit_lock_wait_timeout = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d"
	// myRestoreLockWait restores the session's innodb_lock_wait_timeout.
	myRestoreLockWait = "SET SESSION innodb_lock_wait_timeout = @idemkit_lock_wait_timeout"

	// mariaSetTimeouts is mySetLockWait on MariaDB, which also bounds
	// statements (max_statement_time, %g: seconds) and idle transactions
	// (idle_transaction_timeout, %d: whole seconds).
	mariaSetTimeouts = "SET @idemkit_lock_wait_timeout = @@SESSION.innodb_lock_wait_timeout," +
		" @idemkit_max_statement_time = @@SESSION.max_statement_time," +
		" @idemkit_idle_transaction_timeout = @@SESSION.idle_transaction_timeout," +
		" SESSION innodb_lock_wait_timeout = %d, SESSION max_statement_time = %g, SESSION idle_transaction_timeout = %d"
	mariaRestoreTimeouts = "SET SESSION innodb_lock_wait_timeout = @idemkit_lock_wait_timeout," +
		" SESSION max_statement_time = @idemkit_max_statement_time," +
		" SESSION idle_transaction_timeout = @idemkit_idle_transaction_timeout"
)

// The flavors of server Store.flavor tells apart.
const (
	flavorUnknown int32 = iota
	flavorMySQL
	flavorMariaDB
)

// serverFlavor returns whether the server is MariaDB or MySQL, asking it on
// conn the first time.
func (s *Store) serverFlavor(ctx context.Context, conn *sql.Conn) (int32, error) {
	if f := s.flavor.Load(); f != flavorUnknown {
		return f, nil
	}
	var version string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return flavorUnknown, err
	}
	f := flavorMySQL
	if strings.Contains(strings.ToLower(version), "mariadb") {
		f = flavorMariaDB
	}
	s.flavor.Store(f)
	return f, nil
}

// setTimeouts returns the statements that set the timeouts of a
// transaction with lockTimeout on a server of flavor f, and restore them.
func (s *Store) setTimeouts(f int32, lockTimeout time.Duration) (set, restore string) {
	if f != flavorMariaDB {
		return fmt.Sprintf(mySetLockWait, lockWaitSeconds(lockTimeout)), myRestoreLockWait
	}
	return fmt.Sprintf(mariaSetTimeouts, lockWaitSeconds(lockTimeout), s.cfg.StatementTimeout.Seconds(),
		lockWaitSeconds(s.cfg.IdleInTransactionTimeout)), mariaRestoreTimeouts
}

// lockWaitSeconds is lockTimeout as innodb_lock_wait_timeout takes it:
// whole seconds, rounded up, at least 1.
func lockWaitSeconds(lockTimeout time.Duration) int64 {
	return max(int64((lockTimeout+time.Second-1)/time.Second), 1)
}

// BeginTx implements server.Store.BeginTx: it takes a connection from the
// pool, sets its innodb_lock_wait_timeout to lockTimeout (3s when
// lockTimeout is 0; whole seconds, rounded up, since MySQL counts no
// finer) and begins a transaction, so a claim that waits longer on a
// concurrent uncommitted claim of the same scope fails with error 1205,
// server.ErrInFlight. On MariaDB it also sets max_statement_time and
// idle_transaction_timeout (Config.StatementTimeout,
// Config.IdleInTransactionTimeout). The handler's statements in the
// transaction have the same timeouts. ctx bounds only the start of the
// transaction; the caller must end it with Commit or Rollback, which
// restore the connection's timeouts.
//
// Handle returns the *sql.Tx.
func (s *Store) BeginTx(ctx context.Context, lockTimeout time.Duration) (server.StoreTx, error) {
	if lockTimeout < 0 {
		return nil, fmt.Errorf("idemkit/server: BeginTx: negative lock timeout %v", lockTimeout)
	}
	if lockTimeout == 0 {
		lockTimeout = lockTimeoutDefault
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, interpretError(err)
	}
	flavor, err := s.serverFlavor(ctx, conn)
	if err != nil {
		return nil, errors.Join(interpretError(err), closeConn(conn))
	}
	set, restore := s.setTimeouts(flavor, lockTimeout)
	if _, err := conn.ExecContext(ctx, set); err != nil {
		discardConn(conn) // the timeout may or may not have changed
		return nil, errors.Join(interpretError(err), closeConn(conn))
	}
	// The transaction must outlive a canceled request context (database/sql
	// rolls a transaction back when its context ends): the caller decides
	// how it ends.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		discardConn(conn)
		return nil, errors.Join(interpretError(err), closeConn(conn))
	}
	return &myTx{store: s, conn: conn, tx: tx, q: &querier{q: tx}, restore: restore}, nil
}

// myTx is the server.StoreTx of Store.
type myTx struct {
	store *Store
	conn  *sql.Conn
	tx    *sql.Tx
	q     *querier // tx
	// restore is the statement that restores the session's timeouts.
	restore string

	mu   sync.Mutex
	done bool
}

// Claim implements server.StoreTx.Claim, as Store.Claim does but inside the
// transaction: a claim the INSERT acquires holds the row's lock until the
// transaction ends, and a concurrent claim's INSERT waits for it, bounded
// by innodb_lock_wait_timeout.
func (t *myTx) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return server.ClaimResult{}, interpretError(sql.ErrTxDone)
	}
	return t.store.claim(ctx, t.tx, req)
}

// Complete implements server.StoreTx.Complete: the UPDATE runs in the
// transaction at once, and returns server.ErrLeaseLost if it matches no
// claim.
func (t *myTx) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return interpretError(sql.ErrTxDone)
	}
	return t.store.s.Complete(ctx, t.q, sc, token, now, resp)
}

// Commit implements server.StoreTx.Commit. The COMMIT is sent as a
// statement bound by ctx (database/sql's Tx.Commit takes no context, and a
// frozen network path would hold it forever). An error MySQL answered
// means the transaction rolled back; a COMMIT that went out and whose
// answer did not come back (the connection broke, or ctx ended while it
// waited) may or may not have committed: the error then wraps
// server.ErrOutcomeUnknown as well as server.ErrStoreUnavailable. A
// connection the driver knew was broken before it sent anything
// (driver.ErrBadConn) committed nothing.
func (t *myTx) Commit(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return interpretError(sql.ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return errors.Join(sqlstore.WrapError(server.ErrStoreUnavailable, "COMMIT not sent", err), t.end(ctx, false))
	}
	_, err := t.tx.ExecContext(ctx, "COMMIT")
	if err == nil {
		// The database/sql Tx still believes it is open: end it (a COMMIT
		// with nothing to commit), which gives the connection back.
		return t.end(ctx, true)
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) || errors.Is(err, driver.ErrBadConn) {
		return errors.Join(interpretError(err), t.end(ctx, false))
	}
	_ = t.end(ctx, false)
	return sqlstore.WrapError(server.ErrOutcomeUnknown, "the COMMIT was sent but its answer was lost",
		sqlstore.WrapError(server.ErrStoreUnavailable, "", err))
}

// Rollback implements server.StoreTx.Rollback. It is a no-op after Commit or
// Rollback. A canceled ctx does not stop the rollback, but its deadline, or
// rollbackTimeout, bounds it: a rollback that cannot reach the database
// closes the connection, which ends the transaction too.
func (t *myTx) Rollback(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	return t.end(ctx, false)
}

// end ends the transaction, by COMMIT (already sent: committed is true) or
// ROLLBACK, restores the connection's timeouts and gives
// the connection back to the pool, or closes it when its state is unknown.
// Each statement is bounded by ctx's deadline or rollbackTimeout, not by
// ctx's cancellation.
func (t *myTx) end(ctx context.Context, committed bool) error {
	t.done = true
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		rctx, cancel = context.WithDeadline(rctx, d)
		defer cancel()
	}
	var err error
	if !committed {
		// A ROLLBACK bounded by rctx: go-sql-driver closes the connection
		// when rctx ends, and Tx.Rollback below then fails at once.
		_, err = t.tx.ExecContext(rctx, "ROLLBACK")
	}
	finish := t.tx.Commit
	if !committed {
		finish = t.tx.Rollback
	}
	if ferr := finish(); err == nil && ferr != nil && !errors.Is(ferr, sql.ErrTxDone) {
		err = ferr
	}
	if err == nil {
		if _, rerr := t.conn.ExecContext(rctx, t.restore); rerr != nil {
			err = rerr
		}
	}
	if err != nil {
		discardConn(t.conn)
	}
	cerr := closeConn(t.conn)
	if committed {
		return nil // the outcome is decided: a connection that could not be tidied up is discarded
	}
	return errors.Join(interpretError(err), cerr)
}

// Handle implements server.StoreTx.Handle: the *sql.Tx.
func (t *myTx) Handle() any { return t.tx }

// closeConn returns conn to the pool, reporting a failure.
func closeConn(conn *sql.Conn) error {
	if err := conn.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("idemkit/server/mysqlstore: return a connection to the pool: %w", err)
	}
	return nil
}

// discardConn makes the pool close conn instead of reusing it: its state
// (an open transaction, a changed timeout) is unknown.
func discardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}
