package pgstore

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// dialect is PostgreSQL's part of the store: its statements, times as
// timestamptz, and SQLSTATE error translation. Its statements decide by the
// database's clock_timestamp() and take only durations from the caller, so
// that replicas whose clocks disagree cannot take over each other's live
// leases; $now is NULL, which they replace with clock_timestamp(), unless
// callerClock (tests only) makes them use the caller's times.
type dialect struct {
	callerClock bool
}

var (
	_ sqlstore.Dialect     = (*dialect)(nil)
	_ sqlstore.ClaimReader = (*dialect)(nil)
)

// now is the $now argument of a statement.
func (d *dialect) now(t time.Time) any {
	if !d.callerClock {
		return nil
	}
	return pgTime(t)
}

// pgTime is t as PostgreSQL keeps it: microseconds, UTC.
func pgTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

const (
	// pgClaim: see sqlstore.Dialect.Claim. $7 is the lease and $8 the
	// window, in microseconds. A concurrent uncommitted claim of the same
	// scope makes this wait (bounded by lock_timeout in transactional mode).
	pgClaim = `WITH c AS (SELECT coalesce($6::timestamptz, clock_timestamp()) AS now)
INSERT INTO idempotency_keys AS k
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
SELECT $1, $2, $3, 'in_progress', $4, $5, 1,
    c.now + $7::bigint * interval '1 microsecond', c.now, c.now + $8::bigint * interval '1 microsecond'
FROM c
` + sqlstore.ClaimConflict + `
RETURNING token, created_at <> (SELECT now FROM c)`

	// pgClaimOrRead: see sqlstore.ClaimReader. It neither locks nor writes
	// an existing row: a replay commits nothing.
	pgClaimOrRead = `WITH c AS (SELECT coalesce($6::timestamptz, clock_timestamp()) AS now),
ins AS (
    INSERT INTO idempotency_keys
        (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
    SELECT $1, $2, $3, 'in_progress', $4, $5, 1,
        c.now + $7::bigint * interval '1 microsecond', c.now, c.now + $8::bigint * interval '1 microsecond'
    FROM c
    ON CONFLICT (principal, endpoint, key) DO NOTHING
    RETURNING ` + sqlstore.RecordColumns + `)
SELECT true, false, ` + sqlstore.RecordColumns + ` FROM ins
UNION ALL
SELECT false,
    k.expires_at <= c.now OR (k.state = 'in_progress' AND k.locked_until <= c.now
        AND k.fingerprint = $4 AND k.fingerprint_version = $5),
    ` + sqlstore.RecordColumns + `
FROM idempotency_keys k, c
WHERE k.principal = $1 AND k.endpoint = $2 AND k.key = $3 AND NOT EXISTS (SELECT FROM ins)`

	pgGet = `SELECT ` + sqlstore.RecordColumns + `
FROM idempotency_keys
WHERE principal = $1 AND endpoint = $2 AND key = $3 AND expires_at > coalesce($4::timestamptz, clock_timestamp())`

	// pgCompleteHeld is pgComplete without its expiry condition: see
	// pgTx.Complete.
	pgCompleteHeld = `UPDATE idempotency_keys SET
    state = 'completed',
    locked_until = NULL,
    response_status = $1,
    response_headers = $2,
    response_body = $3,
    response_body_omitted = $4,
    completed_at = coalesce($5::timestamptz, clock_timestamp())
WHERE principal = $6 AND endpoint = $7 AND key = $8 AND token = $9 AND state = 'in_progress'`

	pgComplete = pgCompleteHeld + `
    AND expires_at > coalesce($5::timestamptz, clock_timestamp())`

	pgRelease = `DELETE FROM idempotency_keys
WHERE principal = $1 AND endpoint = $2 AND key = $3 AND token = $4 AND state = 'in_progress'`

	pgExtendLease = `UPDATE idempotency_keys
SET locked_until = coalesce($1::timestamptz, clock_timestamp()) + $6::bigint * interval '1 microsecond'
WHERE principal = $2 AND endpoint = $3 AND key = $4 AND token = $5 AND state = 'in_progress'`

	// pgSweepChunk deletes one bounded chunk of expired rows, skipping rows
	// a concurrent claim holds, in expires_at order (an index range scan).
	pgSweepChunk = `DELETE FROM idempotency_keys WHERE (principal, endpoint, key) IN (
    SELECT principal, endpoint, key FROM idempotency_keys
    WHERE expires_at <= coalesce($1::timestamptz, clock_timestamp()) - $3::bigint * interval '1 microsecond'
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)`

	pgUsage = `SELECT count(*),
    coalesce(sum(coalesce(octet_length(response_body), 0) + coalesce(octet_length(response_headers::text), 0)), 0),
    min(expires_at)
FROM idempotency_keys
WHERE principal = $1 AND expires_at > coalesce($2::timestamptz, clock_timestamp())`

	pgStats = `SELECT
    count(*),
    count(*) FILTER (WHERE expires_at <= $1),
    count(*) FILTER (WHERE expires_at > $1 AND state = 'in_progress'),
    min(created_at) FILTER (WHERE expires_at > $1)
FROM idempotency_keys`
)

// claimArgs are the arguments of pgClaim, pgClaimOrRead and pgClaimOrReplay: the database's
// clock decides, req.Now only anchors req.LockedUntil and req.ExpiresAt,
// whose distances from it are the lease and the window.
// Further arguments, if any, follow them in the same slice.
func (d *dialect) claimArgs(req server.ClaimRequest, more ...any) []any {
	args := make([]any, 0, 8+len(more))
	args = append(args, req.Principal, req.Endpoint, req.Key, req.Fingerprint, req.FingerprintVersion,
		d.now(req.Now), req.LockedUntil.Sub(req.Now).Microseconds(), req.ExpiresAt.Sub(req.Now).Microseconds())
	return append(args, more...)
}

func (d *dialect) Claim(req server.ClaimRequest) (string, []any) { return pgClaim, d.claimArgs(req) }

func (d *dialect) ClaimOrRead(req server.ClaimRequest) (string, []any) {
	return pgClaimOrRead, d.claimArgs(req)
}

func (d *dialect) Get(sc server.Scope, now time.Time) (string, []any) {
	return pgGet, []any{sc.Principal, sc.Endpoint, sc.Key, d.now(now)}
}

func (d *dialect) Complete(sc server.Scope, token int64, now time.Time, resp sqlstore.EncodedResponse) (string, []any) {
	return pgComplete, []any{resp.Status, resp.Header, resp.Body, resp.Omitted, d.now(now), sc.Principal, sc.Endpoint, sc.Key, token}
}

func (d *dialect) Release(sc server.Scope, token int64) (string, []any) {
	return pgRelease, []any{sc.Principal, sc.Endpoint, sc.Key, token}
}

// ExtendLease: locked_until becomes the database's clock_timestamp() plus
// lease (now is not used).
func (d *dialect) ExtendLease(sc server.Scope, token int64, now time.Time, lease time.Duration) (string, []any) {
	return pgExtendLease, []any{d.now(now), sc.Principal, sc.Endpoint, sc.Key, token, lease.Microseconds()}
}

// SweepChunk: a now in the past (the sweeper passes now minus its grace)
// deletes only rows that expired that long before clock_timestamp().
func (d *dialect) SweepChunk(now time.Time, limit int) (string, []any) {
	grace := max(time.Since(now), 0)
	if d.callerClock {
		grace = 0
	}
	return pgSweepChunk, []any{d.now(now), limit, grace.Microseconds()}
}

func (d *dialect) Usage(principal string, now time.Time) (string, []any) {
	return pgUsage, []any{principal, d.now(now)}
}

// Stats counts by the caller's now: it is a report, not a decision.
func (d *dialect) Stats(now time.Time) (string, []any) { return pgStats, []any{pgTime(now)} }

func (d *dialect) TimeLayout() string { return "" }

func (d *dialect) InterpretError(err error) error { return interpretError(err) }

// interpretError translates an error from pgx into the server's sentinels,
// by SQLSTATE and by transport error type. Errors it does not recognise are
// returned unchanged; nil stays nil. Context cancellation is returned
// unchanged (it is the caller's doing, not the store's).
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return server.ErrRecordNotFound
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return sqlstore.WrapError(server.ErrStoreUnavailable, "connect", err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == pgerrcode.LockNotAvailable:
			return sqlstore.WrapError(server.ErrInFlight, "lock timeout", err)
		case pgErr.Code == pgerrcode.SerializationFailure, pgErr.Code == pgerrcode.DeadlockDetected:
			return sqlstore.WrapError(server.ErrStoreBusy, "", err)
		case pgErr.Code == pgerrcode.DiskFull, pgErr.Code == pgerrcode.ProgramLimitExceeded:
			return sqlstore.WrapError(server.ErrStoreFull, "", err)
		case pgErr.Code == pgerrcode.QueryCanceled, pgErr.Code == pgerrcode.IdleInTransactionSessionTimeout:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "timeout", err)
		case pgerrcode.IsConnectionException(pgErr.Code),
			pgErr.Code == pgerrcode.AdminShutdown,
			pgErr.Code == pgerrcode.CrashShutdown,
			pgErr.Code == pgerrcode.CannotConnectNow,
			pgErr.Code == pgerrcode.TooManyConnections:
			return sqlstore.WrapError(server.ErrStoreUnavailable, "", err)
		}
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || pgconn.Timeout(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return sqlstore.WrapError(server.ErrStoreUnavailable, "", err)
	}
	return err
}

// querier adapts a pool or a pgx.Tx to sqlstore.Querier.
type querier struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (q *querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := q.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (q *querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Row {
	return q.q.QueryRow(ctx, query, args...)
}
