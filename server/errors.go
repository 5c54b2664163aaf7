package server

import (
	"errors"

	"github.com/idemkit/idemkit/internal/wire"
)

// Errors of the store contract: a Store returns them (wrapping the driver's
// error, so that errors.Is finds both), and the middleware answers by them.
var (
	// ErrRecordNotFound is returned by Store.Get when no live record exists.
	ErrRecordNotFound = errors.New("idemkit/server: record not found")
	// ErrInFlight means another attempt holds the claim (a concurrent
	// uncommitted claim outlasted the lock timeout). HTTP: 409 + Retry-After.
	ErrInFlight = errors.New("idemkit/server: request with this key is in flight")
	// ErrLeaseLost means a completion, release or extension used a fencing
	// token that is no longer current: the lease ran out and another attempt
	// took the claim over.
	ErrLeaseLost = errors.New("idemkit/server: lease lost to a newer claim")
	// ErrStoreBusy means the store could not take the write in time (SQLite's
	// single writer, PostgreSQL serialization). HTTP: 503 + Retry-After.
	ErrStoreBusy = errors.New("idemkit/server: store busy")
	// ErrStoreUnavailable means the store could not be reached. HTTP: 503;
	// the handler does not run (fail closed).
	ErrStoreUnavailable = errors.New("idemkit/server: store unavailable")
	// ErrStoreFull means the store had no room for a write: SQLite's disk or
	// max_page_count is full, or a value is over the database's size limit
	// (SQLite SQLITE_FULL, SQLITE_TOOBIG; PostgreSQL 53100 disk_full, 54000
	// program_limit_exceeded). The middleware then stores the outcome
	// without the response body, as for a body over Config.MaxResponseBytes.
	ErrStoreFull = errors.New("idemkit/server: store full")
	// ErrOutcomeUnknown means the middleware cannot tell whether a
	// request's result was stored or applied: a transactional COMMIT whose
	// answer was lost, or a lease lost while the handler ran. HTTP: 503
	// problem outcome-unknown; retry with the same key, which replays the
	// result if it was stored.
	ErrOutcomeUnknown = errors.New("idemkit/server: outcome unknown")
)

// Errors behind a refused request, carried by Event.Err (whose Outcome and
// Status already say what happened).
var (
	// errKeyMissing: a protected route got no Idempotency-Key. HTTP: 400.
	errKeyMissing = wire.ErrKeyMissing
	// errFingerprintMismatch: the key was used before with a different
	// request. HTTP: 422.
	errFingerprintMismatch = errors.New("idemkit/server: idempotency key reused with a different request")
	// errBodyTooLarge: the request body is larger than the fingerprint limit.
	// HTTP: 413.
	errBodyTooLarge = errors.New("idemkit/server: request body too large to fingerprint")
	// errUnauthenticated wraps the error of Config.PrincipalFunc. HTTP: 401.
	errUnauthenticated = errors.New("idemkit/server: no principal")
	// errScopeInvalid means a principal or an endpoint cannot be part of a
	// scope: empty, longer than maxScopePartBytes, invalid UTF-8 or with
	// control characters (NUL among them). HTTP: 401 principal-invalid, or
	// 400 endpoint-invalid; the store is never asked.
	errScopeInvalid = errors.New("idemkit/server: invalid principal or endpoint")
)
