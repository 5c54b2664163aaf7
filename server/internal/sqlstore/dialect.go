package sqlstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/server"
)

// Querier runs one statement: a pool, a connection or a transaction of the
// driver, adapted by the driver package.
type Querier interface {
	// Exec runs query and returns the number of rows it changed.
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	// QueryRow runs query; Scan of its Row reads the first row, or fails
	// with the driver's "no rows" error.
	QueryRow(ctx context.Context, query string, args ...any) Row
}

// Row is one result row, as pgx.Row and *sql.Row read it.
type Row interface {
	Scan(dest ...any) error
}

// Dialect is what one SQL database contributes to the store: the text of
// each statement in its placeholder style, with its arguments in its order;
// how it keeps times; and how its errors map to the server sentinels. All
// the logic (claim retries, record decoding, compare-and-set, sweeping in
// chunks, validation) is the Store's.
//
// Statements that read a record return RecordColumns, in that order.
type Dialect interface {
	// Claim inserts a claim, or overwrites the existing row when it has
	// expired, or takes over an in-progress row whose lease ran out and
	// whose fingerprint matches. It returns the row's token and whether
	// its created_at differs from the time the statement claimed at
	// (created_at is kept on a takeover, so this tells a takeover from a
	// fresh claim); no row means the live row blocked the claim.
	Claim(req server.ClaimRequest) (query string, args []any)
	// Get reads the record of sc if it is live at now.
	Get(sc server.Scope, now time.Time) (query string, args []any)
	// Complete stores resp for the in-progress claim of sc held with
	// token, if the record is live at now.
	Complete(sc server.Scope, token int64, now time.Time, resp EncodedResponse) (query string, args []any)
	// Release deletes the in-progress claim of sc held with token.
	Release(sc server.Scope, token int64) (query string, args []any)
	// ExtendLease moves locked_until of the in-progress claim of sc held
	// with token to now plus lease.
	ExtendLease(sc server.Scope, token int64, now time.Time, lease time.Duration) (query string, args []any)
	// SweepChunk deletes at most limit rows expired at now. The Store has
	// taken server.SweepGrace off now already.
	SweepChunk(now time.Time, limit int) (query string, args []any)
	// Usage returns the count of principal's live rows, their stored bytes
	// and the least expires_at among them.
	Usage(principal string, now time.Time) (query string, args []any)
	// Stats returns the count of rows, of rows expired at now, of live
	// in-progress rows, and the least created_at of live rows.
	Stats(now time.Time) (query string, args []any)

	// TimeLayout is the text layout of stored times, or "" when the
	// driver scans timestamps into time.Time.
	TimeLayout() string
	// InterpretError translates a driver error into the server sentinels
	// (wrapping the cause, see WrapError); "no rows" is
	// server.ErrRecordNotFound. Errors it does not recognise are returned
	// unchanged; nil stays nil.
	InterpretError(err error) error
}

// ClaimReader is an optional capability of a Dialect: a claim of a fresh
// scope and the read of an existing one in a single statement that locks
// and writes nothing when the row exists, so that a replay is a plain read.
// Its columns are inserted, reclaimable (the existing row is expired, or a
// lapsed lease this request may take over, which Claim then does) and
// RecordColumns. No row at all means the conflicting row is not in the
// statement's snapshot yet, or was deleted: the Store asks again.
type ClaimReader interface {
	ClaimOrRead(req server.ClaimRequest) (query string, args []any)
}

// RecordColumns are the columns of a record, in the order statements that
// read one return them.
const RecordColumns = `principal, endpoint, key, state, fingerprint, fingerprint_version, token,
    locked_until, response_status, response_headers, response_body, response_body_omitted, created_at, expires_at`

// EncodedResponse is a validated response ready for a Complete statement:
// Header is the stored JSON form (see EncodeHeader), Body never nil.
type EncodedResponse struct {
	Status  int
	Header  []byte
	Body    []byte
	Omitted bool
}

// CallerClock, set by a driver package whose stores decide by the
// database's clock (pgstore, mysqlstore, in init; each calls the one it
// replaced for stores not its own), makes such a store decide leases and
// expiry by the times its callers pass instead, and reports whether st was
// one. Only tests call it, to move time; production stores never do.
var CallerClock func(st server.Store) bool

// ClaimConflict is the ON CONFLICT clause of an upsert claim (PostgreSQL,
// SQLite): the insert of a claim, aliased k, overwrites the existing row
// when it has expired, or takes over an in-progress row whose lease ran out
// and whose fingerprint matches; otherwise the live row blocks the claim
// and the statement returns no row. The inserted created_at is the claim's
// now. created_at is kept on a takeover.
const ClaimConflict = `ON CONFLICT (principal, endpoint, key) DO UPDATE SET
    state = 'in_progress',
    fingerprint = EXCLUDED.fingerprint,
    fingerprint_version = EXCLUDED.fingerprint_version,
    token = k.token + 1,
    locked_until = EXCLUDED.locked_until,
    response_status = NULL,
    response_headers = NULL,
    response_body = NULL,
    response_body_omitted = false,
    completed_at = NULL,
    created_at = CASE WHEN k.expires_at <= EXCLUDED.created_at THEN EXCLUDED.created_at ELSE k.created_at END,
    expires_at = EXCLUDED.expires_at
WHERE k.expires_at <= EXCLUDED.created_at
   OR (k.state = 'in_progress'
       AND k.locked_until <= EXCLUDED.created_at
       AND k.fingerprint = EXCLUDED.fingerprint
       AND k.fingerprint_version = EXCLUDED.fingerprint_version)`
