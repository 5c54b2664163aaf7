package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// timeLayout is the stored form of every timestamp: fixed-width RFC 3339 in
// UTC with milliseconds, so that text order is time order.
const timeLayout = "2006-01-02T15:04:05.000Z"

// formatTime is the stored form of t.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// dialect is SQLite's part of the store: its statements, times as text,
// and error translation by SQLite result code. SQLite is single-host, so
// the caller's clock decides.
type dialect struct{}

var _ sqlstore.Dialect = dialect{}

const (
	// sqliteClaim: see sqlstore.Dialect.Claim. ?6 is now.
	sqliteClaim = `INSERT INTO idempotency_keys AS k
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
VALUES (?1, ?2, ?3, 'in_progress', ?4, ?5, 1, ?7, ?6, ?8)
` + sqlstore.ClaimConflict + `
RETURNING token, created_at <> ?6`

	sqliteGet = `SELECT ` + sqlstore.RecordColumns + `
FROM idempotency_keys
WHERE principal = ? AND endpoint = ? AND key = ? AND expires_at > ?`

	sqliteComplete = `UPDATE idempotency_keys SET
    state = 'completed',
    locked_until = NULL,
    response_status = ?,
    response_headers = ?,
    response_body = ?,
    response_body_omitted = ?,
    completed_at = ?
WHERE principal = ? AND endpoint = ? AND key = ? AND token = ? AND state = 'in_progress' AND expires_at > ?`

	sqliteRelease = `DELETE FROM idempotency_keys
WHERE principal = ? AND endpoint = ? AND key = ? AND token = ? AND state = 'in_progress'`

	sqliteExtendLease = `UPDATE idempotency_keys SET locked_until = ?
WHERE principal = ? AND endpoint = ? AND key = ? AND token = ? AND state = 'in_progress'`

	sqliteSweepChunk = `DELETE FROM idempotency_keys WHERE rowid IN (
    SELECT rowid FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`

	sqliteUsage = `SELECT count(*),
    coalesce(sum(coalesce(length(response_body), 0) + coalesce(length(CAST(response_headers AS BLOB)), 0)), 0),
    min(expires_at)
FROM idempotency_keys
WHERE principal = ? AND expires_at > ?`

	sqliteStats = `SELECT
    count(*),
    coalesce(sum(CASE WHEN expires_at <= ?1 THEN 1 ELSE 0 END), 0),
    coalesce(sum(CASE WHEN expires_at > ?1 AND state = 'in_progress' THEN 1 ELSE 0 END), 0),
    min(CASE WHEN expires_at > ?1 THEN created_at END)
FROM idempotency_keys`
)

func (dialect) Claim(req server.ClaimRequest) (string, []any) {
	return sqliteClaim, []any{req.Principal, req.Endpoint, req.Key, req.Fingerprint, req.FingerprintVersion,
		formatTime(req.Now), formatTime(req.LockedUntil), formatTime(req.ExpiresAt)}
}

func (dialect) Get(sc server.Scope, now time.Time) (string, []any) {
	return sqliteGet, []any{sc.Principal, sc.Endpoint, sc.Key, formatTime(now)}
}

func (dialect) Complete(sc server.Scope, token int64, now time.Time, resp sqlstore.EncodedResponse) (string, []any) {
	omitted := 0
	if resp.Omitted {
		omitted = 1
	}
	nowText := formatTime(now) // plain ? placeholders: modernc reads the name of every numbered one
	return sqliteComplete, []any{resp.Status, string(resp.Header), resp.Body, omitted, nowText,
		sc.Principal, sc.Endpoint, sc.Key, token, nowText}
}

func (dialect) Release(sc server.Scope, token int64) (string, []any) {
	return sqliteRelease, []any{sc.Principal, sc.Endpoint, sc.Key, token}
}

func (dialect) ExtendLease(sc server.Scope, token int64, now time.Time, lease time.Duration) (string, []any) {
	return sqliteExtendLease, []any{formatTime(now.Add(lease)), sc.Principal, sc.Endpoint, sc.Key, token}
}

func (dialect) SweepChunk(now time.Time, limit int) (string, []any) {
	return sqliteSweepChunk, []any{formatTime(now), limit}
}

func (dialect) Usage(principal string, now time.Time) (string, []any) {
	return sqliteUsage, []any{principal, formatTime(now)}
}

func (dialect) Stats(now time.Time) (string, []any) { return sqliteStats, []any{formatTime(now)} }

func (dialect) TimeLayout() string { return timeLayout }

func (dialect) InterpretError(err error) error { return interpretError(err) }

// interpretError translates an error from database/sql and
// modernc.org/sqlite into the server's sentinels, by SQLite result code.
// Errors it does not recognise are returned unchanged; nil stays nil.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return server.ErrRecordNotFound
	}
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		// Extended result codes are on; the primary code is the low byte.
		switch sqliteErr.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return sqlstore.WrapError(server.ErrStoreBusy, "database is locked by another writer", err)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "the database file is corrupt or not an SQLite database", err)
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_TOOBIG:
			return sqlstore.WrapError(server.ErrStoreFull, "", err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "", err)
		}
		return err
	}
	if errors.Is(err, sql.ErrConnDone) {
		return sqlstore.WrapError(server.ErrStoreUnavailable, "", err)
	}
	return err
}

// querier adapts a *sql.DB, *sql.Conn or *sql.Tx to sqlstore.Querier.
type querier struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

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
