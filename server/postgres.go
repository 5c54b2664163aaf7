package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresLockTimeoutDefault is the lock_timeout of a transactional-mode
// claim when BeginTx is given none.
const PostgresLockTimeoutDefault = 3 * time.Second

// Defaults of the timeouts a transactional-mode transaction sets on itself.
const (
	PostgresStatementTimeoutDefault         = 30 * time.Second
	PostgresIdleInTransactionTimeoutDefault = 60 * time.Second
)

// pgRollbackTimeout bounds a rollback whose context was canceled.
const pgRollbackTimeout = 5 * time.Second

// PostgresConfig configures a PostgresStore. The zero value is valid.
type PostgresConfig struct {
	// SweepChunkSize is the largest number of rows one DELETE of Sweep
	// removes; Sweep repeats chunks until one is short. Defaults to
	// SweepChunkSizeDefault (1000).
	SweepChunkSize int
	// LockTimeout is the lock_timeout of a transactional-mode claim when
	// BeginTx is called with a lock timeout of 0: how long it waits on a
	// concurrent, uncommitted claim of the same scope before failing with
	// ErrInFlight. Defaults to PostgresLockTimeoutDefault (3s).
	LockTimeout time.Duration
	// StatementTimeout is the statement_timeout of a transactional-mode
	// transaction (SET LOCAL, so the handler's statements have it too): a
	// statement that runs longer is canceled by PostgreSQL. Lease-mode
	// statements run outside a transaction and are bounded by the caller's
	// context (Config.StoreTimeout), which makes pgx cancel them on the
	// server; to bound them on the server side too, set statement_timeout
	// on the pool (for example statement_timeout=5000 in the DSN). Defaults
	// to PostgresStatementTimeoutDefault (30s).
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of
	// a transactional-mode transaction: PostgreSQL ends the session of a
	// transaction left idle longer (a process that froze or lost its
	// connection without closing it), releasing its locks so that retries
	// of the same key are not blocked. Defaults to
	// PostgresIdleInTransactionTimeoutDefault (60s).
	IdleInTransactionTimeout time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *PostgresConfig) WithDefaults() *PostgresConfig {
	var out PostgresConfig
	if c != nil {
		out = *c
	}
	out.SweepChunkSize = cmp.Or(out.SweepChunkSize, SweepChunkSizeDefault)
	out.LockTimeout = cmp.Or(out.LockTimeout, PostgresLockTimeoutDefault)
	out.StatementTimeout = cmp.Or(out.StatementTimeout, PostgresStatementTimeoutDefault)
	out.IdleInTransactionTimeout = cmp.Or(out.IdleInTransactionTimeout, PostgresIdleInTransactionTimeoutDefault)
	return &out
}

func (c *PostgresConfig) validate() error {
	if c.SweepChunkSize < 0 {
		return fmt.Errorf("idemkit/server: PostgresConfig.SweepChunkSize must not be negative, got %d", c.SweepChunkSize)
	}
	if c.LockTimeout < 0 {
		return fmt.Errorf("idemkit/server: PostgresConfig.LockTimeout must not be negative, got %v", c.LockTimeout)
	}
	if c.StatementTimeout < 0 {
		return fmt.Errorf("idemkit/server: PostgresConfig.StatementTimeout must not be negative, got %v", c.StatementTimeout)
	}
	if c.IdleInTransactionTimeout < 0 {
		return fmt.Errorf("idemkit/server: PostgresConfig.IdleInTransactionTimeout must not be negative, got %v", c.IdleInTransactionTimeout)
	}
	return nil
}

// PostgresStore is a Store in PostgreSQL: the production store, safe for
// many server instances on one database. Its table lives in the pool's
// current schema (the first schema of search_path).
//
// Errors are translated by SQLSTATE: a lock timeout (55P03) is ErrInFlight,
// serialization failures and deadlocks are ErrStoreBusy, and connection
// failures are ErrStoreUnavailable, each wrapping the pgx error.
type PostgresStore struct {
	pool *pgxpool.Pool
	cfg  *PostgresConfig
	// clock is the database's clock in production. Tests of this package
	// make it the caller's (see export_test.go) to move time.
	clock pgClock
	// timeouts caches timeoutArgs.
	timeouts atomic.Pointer[pgTimeouts]
}

// pgClock says whose clock decides leases and expiry. The zero value, the
// only one production code has, is the database's: every statement compares
// and computes with clock_timestamp(), and takes only durations from the
// caller, so that replicas whose clocks disagree cannot take over each
// other's live leases. callerClock makes statements use the times the
// caller passes instead; only tests set it.
type pgClock struct {
	callerClock bool
}

// arg is the $now argument of a statement: NULL, which the statement
// replaces with clock_timestamp(), unless the caller's clock is used.
func (c pgClock) arg(t time.Time) any {
	if !c.callerClock {
		return nil
	}
	return pgTime(t)
}

var (
	_ Store         = (*PostgresStore)(nil)
	_ UsageReporter = (*PostgresStore)(nil)
)

// NewPostgresStore returns a store on pool. cfg may be nil. Call Migrate
// before first use.
func NewPostgresStore(pool *pgxpool.Pool, cfg *PostgresConfig) (*PostgresStore, error) {
	if pool == nil {
		return nil, errors.New("idemkit/server: NewPostgresStore: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &PostgresStore{pool: pool, cfg: cfg}, nil
}

// Pool returns the pool the store uses.
func (s *PostgresStore) Pool() *pgxpool.Pool { return s.pool }

const (
	// pgMigrateLock serialises Migrate calls on one schema across processes.
	pgMigrateLock           = `SELECT pg_advisory_xact_lock(hashtextextended('idemkit/migrate/' || current_schema(), 0))`
	pgCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS idempotency_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	pgSelectMigrations = `SELECT version FROM idempotency_migrations`
	pgInsertMigration  = `INSERT INTO idempotency_migrations (version, name) VALUES ($1, $2)`
)

// Migrate applies the embedded schema migrations that the schema does not
// have yet, in one transaction, and records them in the table
// idempotency_migrations. It is idempotent, and safe when several processes
// call it at once: a transaction-scoped advisory lock (per schema) makes them
// take turns.
func (s *PostgresStore) Migrate(ctx context.Context) error {
	migrations, err := loadMigrations("postgres")
	if err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("idemkit/server: migrate PostgreSQL: %w", interpretPostgresError(err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	for _, q := range []string{pgMigrateLock, pgCreateMigrationsTable} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("idemkit/server: migrate PostgreSQL: %w", interpretPostgresError(err))
		}
	}
	rows, err := tx.Query(ctx, pgSelectMigrations)
	if err != nil {
		return fmt.Errorf("idemkit/server: migrate PostgreSQL: %w", interpretPostgresError(err))
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return fmt.Errorf("idemkit/server: migrate PostgreSQL: %w", interpretPostgresError(err))
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[int(v)] = true
	}
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("idemkit/server: migrate PostgreSQL: apply %s: %w", m.Name, interpretPostgresError(err))
		}
		if _, err := tx.Exec(ctx, pgInsertMigration, m.Version, m.Name); err != nil {
			return fmt.Errorf("idemkit/server: migrate PostgreSQL: record %s: %w", m.Name, interpretPostgresError(err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("idemkit/server: migrate PostgreSQL: commit: %w", interpretPostgresError(err))
	}
	return nil
}

// pgQuerier is what *pgxpool.Pool and pgx.Tx have in common.
type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const pgRecordColumns = `principal, endpoint, key, state, fingerprint, fingerprint_version, token,
    locked_until, response_status, response_headers, response_body, response_body_omitted, created_at, expires_at`

const (
	// pgClaim inserts a claim, or overwrites the existing row when it has
	// expired, or takes over an in-progress row whose lease ran out and
	// whose fingerprint matches. now is the database's clock_timestamp(),
	// unless $6 is given (tests only, see PostgresStore.callerClock); $7 is
	// the lease and $8 the window, in microseconds. No row returned means the
	// live row blocked the claim. created_at is kept on a takeover, so a
	// returned created_at before now tells a takeover from a fresh claim.
	// A concurrent uncommitted claim of the same scope makes this wait
	// (bounded by lock_timeout in transactional mode).
	pgClaim = `WITH c AS (SELECT coalesce($6::timestamptz, clock_timestamp()) AS now)
INSERT INTO idempotency_keys AS k
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
SELECT $1, $2, $3, 'in_progress', $4, $5, 1,
    c.now + $7::bigint * interval '1 microsecond', c.now, c.now + $8::bigint * interval '1 microsecond'
FROM c
ON CONFLICT (principal, endpoint, key) DO UPDATE SET
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
       AND k.fingerprint_version = EXCLUDED.fingerprint_version)
RETURNING token, created_at, (SELECT now FROM c)`

	// pgClaimOrRead is the claim of a fresh scope and, when the scope has a
	// row, the read of it, in one statement that neither locks nor writes
	// that row: a replay commits nothing. Its first column says whether it
	// inserted (the row is the claim, token 1); otherwise the second says
	// whether the existing row is expired or a lapsed lease this request may
	// take over, which pgClaim then does under the row lock. No row at all
	// means the conflicting row was committed after this statement's
	// snapshot, or deleted: the caller asks again.
	pgClaimOrRead = `WITH c AS (SELECT coalesce($6::timestamptz, clock_timestamp()) AS now),
ins AS (
    INSERT INTO idempotency_keys
        (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
    SELECT $1, $2, $3, 'in_progress', $4, $5, 1,
        c.now + $7::bigint * interval '1 microsecond', c.now, c.now + $8::bigint * interval '1 microsecond'
    FROM c
    ON CONFLICT (principal, endpoint, key) DO NOTHING
    RETURNING ` + pgRecordColumns + `)
SELECT true, false, ` + pgRecordColumns + ` FROM ins
UNION ALL
SELECT false,
    k.expires_at <= c.now OR (k.state = 'in_progress' AND k.locked_until <= c.now
        AND k.fingerprint = $4 AND k.fingerprint_version = $5),
    ` + pgRecordColumns + `
FROM idempotency_keys k, c
WHERE k.principal = $1 AND k.endpoint = $2 AND k.key = $3 AND NOT EXISTS (SELECT FROM ins)`

	pgGet = `SELECT ` + pgRecordColumns + `
FROM idempotency_keys
WHERE principal = $1 AND endpoint = $2 AND key = $3 AND expires_at > coalesce($4::timestamptz, clock_timestamp())`

	pgComplete = `UPDATE idempotency_keys SET
    state = 'completed',
    locked_until = NULL,
    response_status = $1,
    response_headers = $2,
    response_body = $3,
    response_body_omitted = $4,
    completed_at = coalesce($5::timestamptz, clock_timestamp())
WHERE principal = $6 AND endpoint = $7 AND key = $8 AND token = $9 AND state = 'in_progress'
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

// pgTime is t as PostgreSQL keeps it: microseconds, UTC.
func pgTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Claim implements Store.Claim, committed on return. A fresh scope is
// claimed, and a live record read, by one INSERT ... ON CONFLICT DO NOTHING
// statement that locks and writes nothing when the row exists, so a replay is
// a plain read; only an expired row or a lapsed lease takes a second
// statement, the INSERT ... ON CONFLICT DO UPDATE ... WHERE that overwrites
// it. ctx cancels the statement.
//
// The database's clock decides: req.Now only anchors req.LockedUntil and
// req.ExpiresAt, whose distances from it are the lease and the window.
func (s *PostgresStore) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	return pgClaimOn(ctx, s.pool, s.clock, req)
}

func pgClaimOn(ctx context.Context, q pgQuerier, clock pgClock, req ClaimRequest) (ClaimResult, error) {
	if err := validateClaimRequest(req); err != nil {
		return ClaimResult{}, err
	}
	lease := req.LockedUntil.Sub(req.Now).Microseconds()
	window := req.ExpiresAt.Sub(req.Now).Microseconds()
	for range claimAttemptsMax {
		var (
			sr                    pgRecordScan
			inserted, reclaimable bool
		)
		err := q.QueryRow(ctx, pgClaimOrRead,
			req.Principal, req.Endpoint, req.Key, req.Fingerprint, req.FingerprintVersion,
			clock.arg(req.Now), lease, window,
		).Scan(sr.dest(&inserted, &reclaimable)...)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // the conflicting row is not in this statement's snapshot yet, or was deleted: again
		case err != nil:
			return ClaimResult{}, interpretPostgresError(err)
		case inserted:
			return ClaimResult{Acquired: true, Token: sr.rec.Token}, nil
		case !reclaimable:
			rec, err := sr.record()
			if err != nil {
				return ClaimResult{}, err
			}
			return ClaimResult{Existing: rec}, nil
		}
		// An expired row or a lapsed lease: the overwriting claim decides,
		// under the row lock, whether it still may.
		var (
			token          int64
			createdAt, now time.Time
		)
		err = q.QueryRow(ctx, pgClaim,
			req.Principal, req.Endpoint, req.Key, req.Fingerprint, req.FingerprintVersion,
			clock.arg(req.Now), lease, window,
		).Scan(&token, &createdAt, &now)
		if err == nil {
			return ClaimResult{Acquired: true, Token: token, TakenOver: token > 1 && !createdAt.Equal(now)}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return ClaimResult{}, interpretPostgresError(err)
		}
		rec, err := pgGetOn(ctx, q, clock, req.Scope, req.Now)
		if errors.Is(err, ErrNotFound) {
			continue // released between the claim and the read: claim again
		}
		if err != nil {
			return ClaimResult{}, err
		}
		return ClaimResult{Existing: rec}, nil
	}
	return ClaimResult{}, fmt.Errorf("%w: %w", ErrStoreBusy, errClaimRetriesExhausted)
}

// Get implements Store.Get. It returns ErrNotFound when no record exists for
// s or the record has expired at now.
func (s *PostgresStore) Get(ctx context.Context, sc Scope, now time.Time) (*Record, error) {
	if err := validateScope(sc); err != nil {
		return nil, err
	}
	return pgGetOn(ctx, s.pool, s.clock, sc, now)
}

func pgGetOn(ctx context.Context, q pgQuerier, clock pgClock, sc Scope, now time.Time) (*Record, error) {
	var sr pgRecordScan
	if err := q.QueryRow(ctx, pgGet, sc.Principal, sc.Endpoint, sc.Key, clock.arg(now)).Scan(sr.dest()...); err != nil {
		return nil, interpretPostgresError(err)
	}
	return sr.record()
}

// pgRecordScan receives the pgRecordColumns of one row.
type pgRecordScan struct {
	rec         Record
	state       string
	lockedUntil *time.Time
	status      *int32
	headers     []byte
	body        []byte
	omitted     bool
}

func (sr *pgRecordScan) dest(extra ...any) []any {
	return append(extra, &sr.rec.Principal, &sr.rec.Endpoint, &sr.rec.Key, &sr.state, &sr.rec.Fingerprint,
		&sr.rec.FingerprintVersion, &sr.rec.Token, &sr.lockedUntil, &sr.status, &sr.headers, &sr.body,
		&sr.omitted, &sr.rec.CreatedAt, &sr.rec.ExpiresAt)
}

func (sr *pgRecordScan) record() (*Record, error) {
	rec := sr.rec
	rec.State = State(sr.state)
	rec.CreatedAt = rec.CreatedAt.UTC()
	rec.ExpiresAt = rec.ExpiresAt.UTC()
	if sr.lockedUntil != nil {
		rec.LockedUntil = sr.lockedUntil.UTC()
	}
	if rec.State == StateCompleted {
		h, err := decodeHeader(sr.headers)
		if err != nil {
			return nil, err
		}
		body := sr.body
		if len(body) == 0 {
			body = nil
		}
		var st int
		if sr.status != nil {
			st = int(*sr.status)
		}
		rec.Response = &StoredResponse{Status: st, Header: h, Body: body, BodyOmitted: sr.omitted}
	}
	return &rec, nil
}

// Complete implements Store.Complete. It returns ErrLeaseLost when the
// claim is no longer held with token (or the record expired at now).
func (s *PostgresStore) Complete(ctx context.Context, sc Scope, token int64, now time.Time, resp *StoredResponse) error {
	return pgCompleteOn(ctx, s.pool, s.clock, sc, token, now, resp)
}

func pgCompleteOn(ctx context.Context, q pgQuerier, clock pgClock, sc Scope, token int64, now time.Time, resp *StoredResponse) error {
	args, err := pgCompleteArgs(clock, sc, token, now, resp)
	if err != nil {
		return err
	}
	tag, err := q.Exec(ctx, pgComplete, args...)
	return pgExpectOneRow(tag, err)
}

// pgCompleteArgs checks a completion and returns the arguments of
// pgComplete.
func pgCompleteArgs(clock pgClock, sc Scope, token int64, now time.Time, resp *StoredResponse) ([]any, error) {
	if err := validateScope(sc); err != nil {
		return nil, err
	}
	if err := validateResponse(resp); err != nil {
		return nil, err
	}
	headers, err := encodeHeader(resp.Header)
	if err != nil {
		return nil, err
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	return []any{resp.Status, headers, body, resp.BodyOmitted, clock.arg(now), sc.Principal, sc.Endpoint, sc.Key, token}, nil
}

// Release implements Store.Release.
func (s *PostgresStore) Release(ctx context.Context, sc Scope, token int64) error {
	if err := validateScope(sc); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, pgRelease, sc.Principal, sc.Endpoint, sc.Key, token)
	return pgExpectOneRow(tag, err)
}

// ExtendLease implements Store.ExtendLease: locked_until becomes the
// database's clock_timestamp() plus lease (now is not used).
func (s *PostgresStore) ExtendLease(ctx context.Context, sc Scope, token int64, now time.Time, lease time.Duration) error {
	if err := validateScope(sc); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, pgExtendLease, s.clock.arg(now), sc.Principal, sc.Endpoint, sc.Key, token, lease.Microseconds())
	return pgExpectOneRow(tag, err)
}

// pgExpectOneRow turns a compare-and-set that changed no row into
// ErrLeaseLost.
func pgExpectOneRow(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return interpretPostgresError(err)
	}
	if tag.RowsAffected() == 0 {
		return ErrLeaseLost
	}
	return nil
}

// Sweep implements Store.Sweep. It deletes expired rows in chunks of
// PostgresConfig.SweepChunkSize, each its own short transaction that skips
// rows locked by a concurrent claim, until a chunk is short, and returns the
// total. ctx is checked between chunks and cancels the running chunk; rows
// deleted by earlier chunks stay deleted and are counted in the returned
// total, which comes with ctx's error.
//
// The database's clock decides here too: a now in the past (the sweeper
// passes now minus its grace) deletes only rows that expired that long
// before clock_timestamp().
func (s *PostgresStore) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	grace := max(time.Since(now), 0)
	if s.clock.callerClock {
		grace = 0
	}
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		tag, err := s.pool.Exec(ctx, pgSweepChunk, s.clock.arg(now), s.cfg.SweepChunkSize, grace.Microseconds())
		if err != nil {
			return total, interpretPostgresError(err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < s.cfg.SweepChunkSize {
			return total, nil
		}
	}
}

// PrincipalUsage implements UsageReporter.
func (s *PostgresStore) PrincipalUsage(ctx context.Context, principal string, now time.Time) (PrincipalUsage, error) {
	var (
		u      PrincipalUsage
		oldest *time.Time
	)
	if err := s.pool.QueryRow(ctx, pgUsage, principal, s.clock.arg(now)).Scan(&u.Keys, &u.StoredBytes, &oldest); err != nil {
		return PrincipalUsage{}, interpretPostgresError(err)
	}
	if oldest != nil {
		u.OldestExpiresAt = oldest.UTC()
	}
	return u, nil
}

// Stats returns the size of the store at now (see StoreStats). It scans the
// table: call it at metrics-scrape intervals, not per request.
func (s *PostgresStore) Stats(ctx context.Context, now time.Time) (StoreStats, error) {
	var (
		st     StoreStats
		oldest *time.Time
	)
	err := s.pool.QueryRow(ctx, pgStats, pgTime(now)).Scan(&st.Rows, &st.Expired, &st.InProgress, &oldest)
	if err != nil {
		return StoreStats{}, interpretPostgresError(err)
	}
	if oldest != nil {
		st.OldestCreatedAt = oldest.UTC()
	}
	return st, nil
}

// BeginTx implements Store.BeginTx: it takes a connection from the pool for
// a transaction whose lock_timeout is lockTimeout (PostgresConfig.LockTimeout
// when lockTimeout is 0), so a claim that waits longer on a concurrent
// uncommitted claim of the same scope fails with ErrInFlight. ctx bounds only
// the wait for a connection; the caller must end the transaction with Commit
// or Rollback.
//
// Round trips: the BEGIN and the SET LOCALs of the timeouts are sent with
// the first claim (or the handler's first statement), and the completion
// with the COMMIT, so that a new key costs two round trips besides the
// handler's.
//
// Handle returns a pgx.Tx.
func (s *PostgresStore) BeginTx(ctx context.Context, lockTimeout time.Duration) (StoreTx, error) {
	if lockTimeout < 0 {
		return nil, fmt.Errorf("idemkit/server: BeginTx: negative lock timeout %v", lockTimeout)
	}
	if lockTimeout == 0 {
		lockTimeout = s.cfg.LockTimeout
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, interpretPostgresError(err)
	}
	t := &pgTx{conn: conn, clock: s.clock, timeouts: s.timeoutArgs(lockTimeout)}
	t.handle = &pgHandleTx{t: t}
	return t, nil
}

// pgTimeouts are the arguments of pgSetTimeouts for one lock timeout.
type pgTimeouts struct {
	lock time.Duration
	args []any
}

// timeoutArgs returns the arguments of pgSetTimeouts, formatted once for the
// lock timeout last asked for (a middleware always asks for the same one).
func (s *PostgresStore) timeoutArgs(lockTimeout time.Duration) []any {
	if t := s.timeouts.Load(); t != nil && t.lock == lockTimeout {
		return t.args
	}
	t := &pgTimeouts{lock: lockTimeout, args: []any{
		fmt.Sprintf("%dms", max(lockTimeout.Milliseconds(), 1)),
		fmt.Sprintf("%dms", max(s.cfg.StatementTimeout.Milliseconds(), 1)),
		fmt.Sprintf("%dms", max(s.cfg.IdleInTransactionTimeout.Milliseconds(), 1)),
	}}
	s.timeouts.Store(t)
	return t.args
}

// pgSetTimeouts sets the timeouts of a transactional-mode transaction, as SET
// LOCAL does, in one statement that a batch can carry.
const pgSetTimeouts = `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
    set_config('idle_in_transaction_session_timeout', $3, true)`

// pgTx is the StoreTx of PostgresStore. Its connection is its own from
// BeginTx until Commit or Rollback. The BEGIN is not sent until the first
// statement: it travels with the claim (or the handler's first statement)
// in one round trip.
type pgTx struct {
	conn     *pgxpool.Conn // nil once the transaction ended
	tx       pgx.Tx        // nil until the BEGIN was sent
	handle   *pgHandleTx
	clock    pgClock
	timeouts []any // the arguments of pgSetTimeouts
	// complete holds the arguments of the completion UPDATE, which Commit
	// sends with the COMMIT in one round trip.
	complete []any
}

// beginBatch returns a batch that begins the transaction and sets its
// timeouts; the caller queues more and sends it with sendBatch.
func (t *pgTx) beginBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(pgSetTimeouts, t.timeouts...)
	return b
}

// sendBatch sends a batch made by beginBatch and reads the results of its
// BEGIN and timeouts.
func (t *pgTx) sendBatch(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	br := t.conn.Conn().SendBatch(ctx, b)
	t.tx = br.Tx()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

// begin sends the BEGIN if it was not sent yet.
func (t *pgTx) begin(ctx context.Context) error {
	if t.conn == nil {
		return pgx.ErrTxClosed
	}
	if t.tx != nil {
		return nil
	}
	br, err := t.sendBatch(ctx, t.beginBatch())
	if err != nil {
		return err
	}
	return br.Close()
}

// Claim implements StoreTx.Claim. The first claim of the transaction
// travels with its BEGIN.
func (t *pgTx) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if t.conn == nil {
		return ClaimResult{}, interpretPostgresError(pgx.ErrTxClosed)
	}
	if t.tx != nil {
		return pgClaimOn(ctx, t.tx, t.clock, req)
	}
	return pgClaimOn(ctx, pgBeginQuerier{t}, t.clock, req)
}

// pgBeginQuerier sends its first QueryRow in one batch with the BEGIN of t,
// and everything else on the begun transaction.
type pgBeginQuerier struct{ t *pgTx }

func (q pgBeginQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := q.t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return q.t.tx.Exec(ctx, sql, args...)
}

func (q pgBeginQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if q.t.tx != nil || q.t.conn == nil {
		return pgRowFunc(func(dest ...any) error {
			if err := q.t.begin(ctx); err != nil {
				return err
			}
			return q.t.tx.QueryRow(ctx, sql, args...).Scan(dest...)
		})
	}
	b := q.t.beginBatch()
	b.Queue(sql, args...)
	return pgRowFunc(func(dest ...any) error {
		br, err := q.t.sendBatch(ctx, b)
		if err != nil {
			return err
		}
		err = br.QueryRow().Scan(dest...)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
}

// pgRowFunc is a pgx.Row whose Scan is a function.
type pgRowFunc func(dest ...any) error

func (f pgRowFunc) Scan(dest ...any) error { return f(dest...) }

// Complete implements StoreTx.Complete. It checks resp and queues the
// completion; Commit sends it with the COMMIT, in one round trip, and
// returns ErrLeaseLost (having rolled back) if it matches no claim.
func (t *pgTx) Complete(_ context.Context, sc Scope, token int64, now time.Time, resp *StoredResponse) error {
	args, err := pgCompleteArgs(t.clock, sc, token, now, resp)
	if err != nil {
		return err
	}
	t.complete = args
	return nil
}

// pgCompleteInTx is pgComplete failing with division_by_zero (22012) when it
// matches no row, so that the COMMIT sent behind it in the same round trip
// finds the transaction aborted and rolls back.
const pgCompleteInTx = `WITH u AS (` + pgComplete + `
RETURNING 1)
SELECT 1 / count(*) FROM u`

// Commit implements StoreTx.Commit, sending a queued completion and the
// COMMIT in one round trip. When the COMMIT was sent but no answer came
// back (the connection broke or ctx ended while it waited), the transaction
// may or may not have committed: the error then wraps ErrOutcomeUnknown as
// well as ErrStoreUnavailable. Only an error PostgreSQL answered means it
// rolled back.
func (t *pgTx) Commit(ctx context.Context) error {
	if t.conn == nil {
		return interpretPostgresError(pgx.ErrTxClosed)
	}
	defer t.end()
	if t.tx == nil && t.complete == nil {
		return nil // nothing was sent: there is nothing to commit
	}
	if t.complete == nil {
		err := t.tx.Commit(ctx)
		if err == nil {
			return nil
		}
		return pgCommitError(err)
	}
	var b *pgx.Batch
	if t.tx == nil {
		b = t.beginBatch()
	} else {
		b = &pgx.Batch{}
	}
	b.Queue(pgCompleteInTx, t.complete...)
	b.Queue("COMMIT")
	br := t.conn.Conn().SendBatch(ctx, b)
	var err error
	for range len(b.QueuedQueries) - 1 {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err != nil {
		_ = br.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "22012" {
			return ErrLeaseLost // the transaction is aborted: the COMMIT rolls back
		}
		return pgCommitError(err)
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		return pgCommitError(err)
	}
	return nil
}

// pgCommitError classifies the failure of a round trip that carried a
// COMMIT.
func pgCommitError(err error) error {
	var pgErr *pgconn.PgError
	// pgconn.SafeToRetry is no proof here: pgx reports a connection that
	// broke while it waited for the COMMIT's answer as "conn closed", which
	// it marks safe to retry although the COMMIT went out. An error
	// PostgreSQL answered before the COMMIT aborted the transaction, so the
	// COMMIT rolled back.
	if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pgx.ErrTxClosed) {
		return interpretPostgresError(err)
	}
	return wrapStoreError(ErrOutcomeUnknown, "the COMMIT was sent but its answer was lost",
		wrapStoreError(ErrStoreUnavailable, "", err))
}

// end closes the handle and gives the connection back to the pool, which
// closes it instead if it is still in a transaction or broken.
func (t *pgTx) end() {
	t.conn.Release()
	t.conn = nil
	t.complete = nil
}

// Rollback implements StoreTx.Rollback. It is a no-op after Commit or
// Rollback. A canceled ctx does not stop the rollback, but its deadline, or
// pgRollbackTimeout, bounds it: a rollback that cannot reach the database
// closes the connection, which ends the transaction too.
func (t *pgTx) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	defer t.end()
	if t.tx == nil {
		return nil // nothing was sent
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgRollbackTimeout)
	defer cancel()
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		rctx, cancel = context.WithDeadline(rctx, d)
		defer cancel()
	}
	err := t.tx.Rollback(rctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return interpretPostgresError(err)
}

// pgHandleTx is the pgx.Tx a handler writes its effect on. Its first
// statement sends the BEGIN if the claim has not. Once the transaction ended
// (Commit sends its COMMIT past the pgx.Tx, whose connection then serves
// other requests), every method fails with pgx.ErrTxClosed rather than run
// outside the transaction.
type pgHandleTx struct{ t *pgTx }

var _ pgx.Tx = (*pgHandleTx)(nil)

func (h *pgHandleTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := h.t.begin(ctx); err != nil {
		return nil, err
	}
	return h.t.tx.Begin(ctx)
}

func (h *pgHandleTx) Commit(ctx context.Context) error {
	if err := h.t.begin(ctx); err != nil {
		return err
	}
	return h.t.tx.Commit(ctx)
}

func (h *pgHandleTx) Rollback(ctx context.Context) error {
	if err := h.t.begin(ctx); err != nil {
		return err
	}
	return h.t.tx.Rollback(ctx)
}

func (h *pgHandleTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := h.t.begin(ctx); err != nil {
		return 0, err
	}
	return h.t.tx.CopyFrom(ctx, table, columns, src)
}

func (h *pgHandleTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := h.t.begin(ctx); err != nil {
		return pgErrBatch{err}
	}
	return h.t.tx.SendBatch(ctx, b)
}

// LargeObjects sends the BEGIN, if needed, on a background context: it has
// none of its own.
func (h *pgHandleTx) LargeObjects() pgx.LargeObjects {
	_ = h.t.begin(context.Background())
	if h.t.tx == nil {
		return pgx.LargeObjects{}
	}
	return h.t.tx.LargeObjects()
}

func (h *pgHandleTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := h.t.begin(ctx); err != nil {
		return nil, err
	}
	return h.t.tx.Prepare(ctx, name, sql)
}

func (h *pgHandleTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := h.t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return h.t.tx.Exec(ctx, sql, args...)
}

func (h *pgHandleTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := h.t.begin(ctx); err != nil {
		return nil, err
	}
	return h.t.tx.Query(ctx, sql, args...)
}

func (h *pgHandleTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := h.t.begin(ctx); err != nil {
		return pgRowFunc(func(...any) error { return err })
	}
	return h.t.tx.QueryRow(ctx, sql, args...)
}

// Conn returns the connection, or nil once the transaction ended.
func (h *pgHandleTx) Conn() *pgx.Conn {
	if h.t.conn == nil {
		return nil
	}
	return h.t.conn.Conn()
}

// pgErrBatch is the answer of a pgHandleTx that could not begin.
type pgErrBatch struct{ err error }

func (b pgErrBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b pgErrBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b pgErrBatch) QueryRow() pgx.Row {
	return pgRowFunc(func(...any) error { return b.err })
}
func (b pgErrBatch) Close() error { return b.err }
func (b pgErrBatch) Tx() pgx.Tx   { return nil }

// Handle implements StoreTx.Handle: the pgx.Tx, which fails with
// pgx.ErrTxClosed once the transaction ended.
func (t *pgTx) Handle() any { return t.handle }
