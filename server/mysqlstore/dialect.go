package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// dialect is MySQL's part of the store: its statements, times as
// DATETIME(6) in UTC read back as text, and error translation by MySQL
// error number. Its statements decide by the database's clock,
// UTC_TIMESTAMP(6), and take only durations from the caller, so that
// replicas whose clocks disagree cannot take over each other's live leases;
// the now argument of a statement is NULL, which nowSQL replaces with
// UTC_TIMESTAMP(6), unless callerClock (tests only) makes them use the
// caller's times.
//
// UTC_TIMESTAMP(6), like NOW(6), is the time the statement began: one value
// for every use in the statement (a claim's created_at, locked_until and
// expires_at agree to the microsecond), and the value a statement-based
// binlog replays. SYSDATE(6) is read anew at each call and differs on a
// replica, so no statement uses it. A statement that waited for a row lock
// decides by the time it began, which errs on the safe side: a lease looks
// live a little longer, and a record expires a little later.
type dialect struct {
	callerClock bool
}

var _ sqlstore.Dialect = (*dialect)(nil)

// timeLayout is the text form in which the statements read times back
// (DATE_FORMAT with timeFormat), in UTC. Reading text, not DATETIME, keeps
// the store independent of the DSN's parseTime and loc.
const timeLayout = "2006-01-02 15:04:05.000000"

// formatTime is t as a statement argument: UTC, microseconds.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// now is the now argument of a statement: NULL (the database's clock)
// unless callerClock.
func (d *dialect) now(t time.Time) any {
	if !d.callerClock {
		return nil
	}
	return formatTime(t)
}

// nowSQL is the now of a statement: its argument, or UTC_TIMESTAMP(6) when
// that is NULL.
const nowSQL = `CAST(COALESCE(?, UTC_TIMESTAMP(6)) AS DATETIME(6))`

// timeFormat is timeLayout as a DATE_FORMAT format.
const timeFormat = `'%Y-%m-%d %H:%i:%s.%f'`

// recordColumns are sqlstore.RecordColumns as MySQL reads them: key is a
// reserved word, and times are text in timeLayout.
const recordColumns = "principal, endpoint, `key`, state, fingerprint, fingerprint_version, token,\n" +
	"    DATE_FORMAT(locked_until, " + timeFormat + "), response_status, response_headers, response_body, response_body_omitted,\n" +
	"    DATE_FORMAT(created_at, " + timeFormat + "), DATE_FORMAT(expires_at, " + timeFormat + ")"

// wherePK selects the row of one scope.
const wherePK = "principal = ? AND endpoint = ? AND `key` = ?"

const (
	// myInsert is the claim: a plain INSERT, which fails with a
	// duplicate-key error (1062) when any row holds the scope, live or not
	// (see claim). Never INSERT IGNORE, which also turns data truncation and
	// other errors into warnings. A concurrent uncommitted claim of the same
	// scope makes it wait (bounded by innodb_lock_wait_timeout in
	// transactional mode: error 1205).
	myInsert = "INSERT INTO idempotency_keys\n" +
		"    (principal, endpoint, `key`, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)\n" +
		"VALUES (?, ?, ?, 'in_progress', ?, ?, 1,\n" +
		"    " + nowSQL + " + INTERVAL ? MICROSECOND, " + nowSQL + ", " + nowSQL + " + INTERVAL ? MICROSECOND)"

	// myTakeover overwrites the row of a scope whose record has expired, or
	// takes over an in-progress claim whose lease ran out and whose
	// fingerprint matches, deciding under the row lock; otherwise it changes
	// nothing. LAST_INSERT_ID(token + 1) hands the new token back in the OK
	// packet (Result.LastInsertId), since MySQL has no RETURNING. The last
	// condition, when its argument is not NULL, makes it a compare-and-set
	// on the token the claim read. Single-table UPDATE assigns left to
	// right, so created_at is decided from the old expires_at, before
	// expires_at is set; it is kept on a takeover.
	myTakeover = "UPDATE idempotency_keys SET\n" +
		"    state = 'in_progress',\n" +
		"    fingerprint = ?,\n" +
		"    fingerprint_version = ?,\n" +
		"    token = LAST_INSERT_ID(token + 1),\n" +
		"    locked_until = " + nowSQL + " + INTERVAL ? MICROSECOND,\n" +
		"    response_status = NULL,\n" +
		"    response_headers = NULL,\n" +
		"    response_body = NULL,\n" +
		"    response_body_omitted = FALSE,\n" +
		"    completed_at = NULL,\n" +
		"    created_at = IF(expires_at <= " + nowSQL + ", " + nowSQL + ", created_at),\n" +
		"    expires_at = " + nowSQL + " + INTERVAL ? MICROSECOND\n" +
		"WHERE " + wherePK + "\n" +
		"    AND (expires_at <= " + nowSQL + "\n" +
		"        OR (state = 'in_progress' AND locked_until <= " + nowSQL + " AND fingerprint = ? AND fingerprint_version = ?))\n" +
		"    AND (? IS NULL OR token = ?)"

	myGet = "SELECT " + recordColumns + "\nFROM idempotency_keys\nWHERE " + wherePK + " AND expires_at > " + nowSQL

	myComplete = "UPDATE idempotency_keys SET\n" +
		"    state = 'completed',\n" +
		"    locked_until = NULL,\n" +
		"    response_status = ?,\n" +
		"    response_headers = ?,\n" +
		"    response_body = ?,\n" +
		"    response_body_omitted = ?,\n" +
		"    completed_at = " + nowSQL + "\n" +
		"WHERE " + wherePK + " AND token = ? AND state = 'in_progress' AND expires_at > " + nowSQL

	myRelease = "DELETE FROM idempotency_keys\nWHERE " + wherePK + " AND token = ? AND state = 'in_progress'"

	myExtendLease = "UPDATE idempotency_keys SET locked_until = " + nowSQL + " + INTERVAL ? MICROSECOND\n" +
		"WHERE " + wherePK + " AND token = ? AND state = 'in_progress'"

	// myHeld reports whether a claim is held with a token: see
	// Store.ExtendLease.
	myHeld = "SELECT count(*) FROM idempotency_keys WHERE " + wherePK + " AND token = ? AND state = 'in_progress'"

	// mySweepChunk deletes one bounded chunk of expired rows in expires_at
	// order (an index range scan). MySQL cannot DELETE from a subquery on
	// the same table, nor LIMIT one in IN, so unlike PostgreSQL's sweep it
	// does not skip rows a concurrent claim holds: it waits for them (an
	// expired row taken over stops matching once its claim commits).
	mySweepChunk = "DELETE FROM idempotency_keys\n" +
		"WHERE expires_at <= " + nowSQL + " - INTERVAL ? MICROSECOND\n" +
		"ORDER BY expires_at\n" +
		"LIMIT ?"

	myUsage = "SELECT count(*),\n" +
		"    COALESCE(SUM(COALESCE(OCTET_LENGTH(response_body), 0) + COALESCE(OCTET_LENGTH(response_headers), 0)), 0),\n" +
		"    DATE_FORMAT(MIN(expires_at), " + timeFormat + ")\n" +
		"FROM idempotency_keys\n" +
		"WHERE principal = ? AND expires_at > " + nowSQL

	// myStats is four subqueries, each served by its own index: the count
	// by the smallest index, the expired rows by a range of the expires_at
	// index, and the live in-progress rows by the 'in_progress' range of
	// the (state, locked_until) index.
	myStats = "SELECT\n" +
		"    (SELECT count(*) FROM idempotency_keys),\n" +
		"    (SELECT count(*) FROM idempotency_keys WHERE expires_at <= ?),\n" +
		"    (SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress' AND expires_at > ?),\n" +
		"    (SELECT DATE_FORMAT(MIN(created_at), " + timeFormat + ") FROM idempotency_keys WHERE expires_at > ?)"
)

// claimArgs are the arguments of myInsert: the database's clock decides,
// req.Now only anchors req.LockedUntil and req.ExpiresAt, whose distances
// from it are the lease and the window.
func (d *dialect) claimArgs(req server.ClaimRequest) []any {
	now := d.now(req.Now)
	return []any{req.Principal, req.Endpoint, req.Key, req.Fingerprint, req.FingerprintVersion,
		now, req.LockedUntil.Sub(req.Now).Microseconds(), now, now, req.ExpiresAt.Sub(req.Now).Microseconds()}
}

// takeoverArgs are the arguments of myTakeover; token is nil, or the token
// the row must still have.
func (d *dialect) takeoverArgs(req server.ClaimRequest, token any) []any {
	now := d.now(req.Now)
	return []any{req.Fingerprint, req.FingerprintVersion, now, req.LockedUntil.Sub(req.Now).Microseconds(),
		now, now, now, req.ExpiresAt.Sub(req.Now).Microseconds(),
		req.Principal, req.Endpoint, req.Key, now, now, req.Fingerprint, req.FingerprintVersion, token, token}
}

// Claim is the takeover statement; sqlstore.Store.Claim, which expects a
// statement that returns the claimed row, is never called with this
// dialect: MySQL has no RETURNING, and Store.Claim (claim.go) runs the
// INSERT, the read and this UPDATE itself.
func (d *dialect) Claim(req server.ClaimRequest) (string, []any) {
	return myTakeover, d.takeoverArgs(req, nil)
}

func (d *dialect) Get(sc server.Scope, now time.Time) (string, []any) {
	return myGet, []any{sc.Principal, sc.Endpoint, sc.Key, d.now(now)}
}

func (d *dialect) Complete(sc server.Scope, token int64, now time.Time, resp sqlstore.EncodedResponse) (string, []any) {
	n := d.now(now)
	return myComplete, []any{resp.Status, string(resp.Header), resp.Body, resp.Omitted, n,
		sc.Principal, sc.Endpoint, sc.Key, token, n}
}

func (d *dialect) Release(sc server.Scope, token int64) (string, []any) {
	return myRelease, []any{sc.Principal, sc.Endpoint, sc.Key, token}
}

// ExtendLease: locked_until becomes the database's UTC_TIMESTAMP(6) plus
// lease (now is not used).
func (d *dialect) ExtendLease(sc server.Scope, token int64, now time.Time, lease time.Duration) (string, []any) {
	return myExtendLease, []any{d.now(now), lease.Microseconds(), sc.Principal, sc.Endpoint, sc.Key, token}
}

// SweepChunk: a now in the past (the sweeper passes now minus its grace)
// deletes only rows that expired that long before the database's clock.
func (d *dialect) SweepChunk(now time.Time, limit int) (string, []any) {
	grace := max(time.Since(now), 0)
	if d.callerClock {
		grace = 0
	}
	return mySweepChunk, []any{d.now(now), grace.Microseconds(), limit}
}

func (d *dialect) Usage(principal string, now time.Time) (string, []any) {
	return myUsage, []any{principal, d.now(now)}
}

// Stats counts by the caller's now: it is a report, not a decision.
func (d *dialect) Stats(now time.Time) (string, []any) {
	n := formatTime(now)
	return myStats, []any{n, n, n}
}

func (d *dialect) TimeLayout() string { return timeLayout }

func (d *dialect) InterpretError(err error) error { return interpretError(err) }

// MySQL error numbers the store translates (MariaDB uses the same numbers).
const (
	erDupEntry              = 1062 // ER_DUP_ENTRY: the claim's INSERT met a row of the scope
	erLockWaitTimeout       = 1205 // ER_LOCK_WAIT_TIMEOUT: innodb_lock_wait_timeout ran out
	erLockDeadlock          = 1213 // ER_LOCK_DEADLOCK: InnoDB rolled the transaction back
	erRecordFileFull        = 1114 // ER_RECORD_FILE_FULL: the table is full
	erDiskFull              = 1021 // ER_DISK_FULL
	erOutOfResources        = 1041 // ER_OUT_OF_RESOURCES
	erNetPacketTooLarge     = 1153 // ER_NET_PACKET_TOO_LARGE: a value over max_allowed_packet
	erTooManyConnections    = 1040 // ER_CON_COUNT_ERROR
	erTooManyUserConns      = 1203 // ER_TOO_MANY_USER_CONNECTIONS
	erServerShutdown        = 1053 // ER_SERVER_SHUTDOWN
	erAccessDenied          = 1045 // ER_ACCESS_DENIED_ERROR
	erDBAccessDenied        = 1044 // ER_DBACCESS_DENIED_ERROR
	erBadDB                 = 1049 // ER_BAD_DB_ERROR
	erQueryInterrupted      = 1317 // ER_QUERY_INTERRUPTED: KILL QUERY
	erConnectionKilled      = 1927 // ER_CONNECTION_KILLED (MariaDB)
	erStatementTimeout      = 1969 // ER_STATEMENT_TIMEOUT: MariaDB max_statement_time
	erQueryTimeout          = 3024 // ER_QUERY_TIMEOUT: MySQL max_execution_time
	erReadOnly              = 1290 // ER_OPTION_PREVENTS_STATEMENT: --read-only (a replica, a failover)
	erReadOnlyTransaction   = 1792 // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
	erClientInteractionIdle = 4031 // ER_CLIENT_INTERACTION_TIMEOUT: MySQL 8 closed an idle session
)

// isDuplicate reports whether err is MySQL's duplicate-key error.
func isDuplicate(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == erDupEntry
}

// interpretError translates an error from database/sql and go-sql-driver
// into the server's sentinels, by MySQL error number and by transport
// error. Errors it does not recognise (a duplicate key among them, which
// the claim handles) are returned unchanged; nil stays nil. Context
// cancellation is returned unchanged (it is the caller's doing, not the
// store's).
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return server.ErrRecordNotFound
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		switch myErr.Number {
		case erLockWaitTimeout:
			return sqlstore.WrapError(server.ErrInFlight, "lock wait timeout", err)
		case erLockDeadlock:
			return sqlstore.WrapError(server.ErrStoreBusy, "deadlock", err)
		case erRecordFileFull, erDiskFull, erNetPacketTooLarge:
			return sqlstore.WrapError(server.ErrStoreFull, "", err)
		case erQueryInterrupted, erStatementTimeout, erQueryTimeout:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "timeout", err)
		case erAccessDenied, erDBAccessDenied, erBadDB:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "connect", err)
		case erTooManyConnections, erTooManyUserConns, erServerShutdown, erConnectionKilled, erOutOfResources,
			erReadOnly, erReadOnlyTransaction, erClientInteractionIdle:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "", err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return sqlstore.WrapError(server.ErrStoreUnavailable, "", err)
	}
	return err
}

// execer is a *sql.DB, *sql.Conn or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// querier adapts an execer to sqlstore.Querier.
type querier struct{ q execer }

func (q *querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q *querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return q.q.QueryRowContext(ctx, query, args...)
}
