package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// storeError wraps a sentinel (ErrStoreBusy, ErrInFlight, ...) around the
// driver error that caused it, so that errors.Is finds both the sentinel and
// the cause, and the message shows both.
type storeError struct {
	sentinel error
	detail   string
	cause    error
}

func (e *storeError) Error() string {
	if e.detail != "" {
		return fmt.Sprintf("%v: %s: %v", e.sentinel, e.detail, e.cause)
	}
	return fmt.Sprintf("%v: %v", e.sentinel, e.cause)
}

func (e *storeError) Unwrap() []error { return []error{e.sentinel, e.cause} }

func wrapStoreError(sentinel error, detail string, cause error) error {
	return &storeError{sentinel: sentinel, detail: detail, cause: cause}
}

// interpretPostgresError translates an error from pgx into the package's
// sentinels, by SQLSTATE and by transport error type. Errors it does not
// recognise are returned unchanged; nil stays nil. Context cancellation is
// returned unchanged (it is the caller's doing, not the store's).
func interpretPostgresError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return wrapStoreError(ErrStoreUnavailable, "connect", err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == pgerrcode.LockNotAvailable:
			return wrapStoreError(ErrInFlight, "lock timeout", err)
		case pgErr.Code == pgerrcode.SerializationFailure, pgErr.Code == pgerrcode.DeadlockDetected:
			return wrapStoreError(ErrStoreBusy, "", err)
		case pgErr.Code == pgerrcode.DiskFull, pgErr.Code == pgerrcode.ProgramLimitExceeded:
			return wrapStoreError(ErrStoreFull, "", err)
		case pgErr.Code == pgerrcode.QueryCanceled, pgErr.Code == pgerrcode.IdleInTransactionSessionTimeout:
			return wrapStoreError(ErrStoreUnavailable, "timeout", err)
		case pgerrcode.IsConnectionException(pgErr.Code),
			pgErr.Code == pgerrcode.AdminShutdown,
			pgErr.Code == pgerrcode.CrashShutdown,
			pgErr.Code == pgerrcode.CannotConnectNow,
			pgErr.Code == pgerrcode.TooManyConnections:
			return wrapStoreError(ErrStoreUnavailable, "", err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.Timeout(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return wrapStoreError(ErrStoreUnavailable, "", err)
	}
	return err
}

// interpretSQLiteError translates an error from database/sql and
// modernc.org/sqlite into the package's sentinels, by SQLite result code.
// Errors it does not recognise are returned unchanged; nil stays nil.
func interpretSQLiteError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	var sqliteErr *sqlite.Error
	if errors.As(err, &sqliteErr) {
		// Extended result codes are on; the primary code is the low byte.
		switch sqliteErr.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return wrapStoreError(ErrStoreBusy, "database is locked by another writer", err)
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return wrapStoreError(ErrStoreUnavailable, "the database file is corrupt or not an SQLite database", err)
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_TOOBIG:
			return wrapStoreError(ErrStoreFull, "", err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY:
			return wrapStoreError(ErrStoreUnavailable, "", err)
		}
		return err
	}
	if errors.Is(err, sql.ErrConnDone) {
		return wrapStoreError(ErrStoreUnavailable, "", err)
	}
	return err
}
