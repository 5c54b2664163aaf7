package server

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver used by OpenSQLite
)

// SweepChunkSizeDefault is the default number of rows one Sweep statement
// deletes.
const SweepChunkSizeDefault = 1000

// SQLiteBusyTimeoutDefault is how long a transactional-mode claim waits for
// SQLite's write lock when BeginTx is given no lock timeout.
const SQLiteBusyTimeoutDefault = 3 * time.Second

// sqliteOpenBusyTimeout is the busy_timeout OpenSQLite sets on every
// connection: how long a statement waits for the write lock before it fails
// with SQLITE_BUSY (ErrStoreBusy).
const sqliteOpenBusyTimeout = 5000 * time.Millisecond

// sqliteTimeFormat is the stored form of every timestamp: fixed-width RFC
// 3339 in UTC with milliseconds, so that text order is time order.
const sqliteTimeFormat = "2006-01-02T15:04:05.000Z"

// SQLiteConfig configures a SQLiteStore. The zero value is valid.
type SQLiteConfig struct {
	// SweepChunkSize is the largest number of rows one DELETE of Sweep
	// removes; Sweep repeats chunks until one is short. Defaults to
	// SweepChunkSizeDefault (1000).
	SweepChunkSize int
	// BusyTimeout is how long a transactional-mode claim waits for the write
	// lock, held by another transaction, when BeginTx is called with a lock
	// timeout of 0. A longer wait fails with ErrStoreBusy. Defaults to
	// SQLiteBusyTimeoutDefault (3s).
	BusyTimeout time.Duration
	// Logger receives warnings about cleanup that failed after the outcome
	// of an operation was decided (a connection that could not be reset).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *SQLiteConfig) WithDefaults() *SQLiteConfig {
	var out SQLiteConfig
	if c != nil {
		out = *c
	}
	out.SweepChunkSize = cmp.Or(out.SweepChunkSize, SweepChunkSizeDefault)
	out.BusyTimeout = cmp.Or(out.BusyTimeout, SQLiteBusyTimeoutDefault)
	out.Logger = cmp.Or(out.Logger, slog.Default())
	return &out
}

func (c *SQLiteConfig) validate() error {
	if c.SweepChunkSize < 0 {
		return fmt.Errorf("idemkit/server: SQLiteConfig.SweepChunkSize must not be negative, got %d", c.SweepChunkSize)
	}
	if c.BusyTimeout < 0 {
		return fmt.Errorf("idemkit/server: SQLiteConfig.BusyTimeout must not be negative, got %v", c.BusyTimeout)
	}
	return nil
}

// SQLiteStore is a Store in an SQLite database, for a single node: the
// embedded default and the demo. It has the same semantics as PostgresStore.
//
// SQLite has one writer at a time. A statement that cannot get the write lock
// within the connection's busy_timeout fails with ErrStoreBusy. Use
// OpenSQLite, or open the database yourself in WAL mode with a busy_timeout
// and synchronous=FULL. Do not limit the pool to one connection
// (SetMaxOpenConns(1)) when you use transactional mode: an open transaction
// holds its connection until it ends, and every other request would queue
// behind it.
//
// In transactional mode the claim is the first statement of the transaction,
// so it takes the write lock. The store remembers, per process, which scopes
// an open transaction has claimed, and answers a second transactional claim
// of such a scope with ErrInFlight at once instead of waiting for the lock.
type SQLiteStore struct {
	db  *sql.DB
	cfg *SQLiteConfig

	mu       sync.Mutex
	txScopes map[Scope]struct{} // scopes claimed by an open StoreTx

	// path and file identify the database file the store was opened on
	// (nil file for an in-memory database): a file replaced under it is
	// detected and the store fails closed.
	path string
	file os.FileInfo
}

var (
	_ Store         = (*SQLiteStore)(nil)
	_ UsageReporter = (*SQLiteStore)(nil)
)

// OpenSQLite opens the SQLite database at path with modernc.org/sqlite,
// creating the file if needed, and configures every connection for this
// store: WAL journal, synchronous=FULL, a busy_timeout of 5 s, and foreign
// keys on. It pings the database, so a file that is not an SQLite database
// fails here with an error wrapping ErrStoreUnavailable. ctx bounds only the
// opening; close the returned *sql.DB when done.
//
// You may instead open the database yourself and pass it to NewSQLiteStore.
func OpenSQLite(ctx context.Context, path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("idemkit/server: OpenSQLite: path is empty")
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteOpenBusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("idemkit/server: open SQLite database %q: %w", path, interpretSQLiteError(err))
	}
	// Reading the schema makes SQLite read the file header, so a file that
	// is not a database fails now rather than at the first claim.
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("idemkit/server: open SQLite database %q: %w", path, interpretSQLiteError(err))
	}
	return db, nil
}

// NewSQLiteStore returns a store on db, which must be an SQLite database
// opened with modernc.org/sqlite (see OpenSQLite). cfg may be nil. Call
// Migrate before first use.
func NewSQLiteStore(db *sql.DB, cfg *SQLiteConfig) (*SQLiteStore, error) {
	if db == nil {
		return nil, errors.New("idemkit/server: NewSQLiteStore: db is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &SQLiteStore{db: db, cfg: cfg, txScopes: make(map[Scope]struct{})}
	if err := s.identifyFile(); err != nil {
		return nil, err
	}
	return s, nil
}

// identifyFile records which file the main database is, by PRAGMA
// database_list and os.Stat.
func (s *SQLiteStore) identifyFile() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return fmt.Errorf("idemkit/server: NewSQLiteStore: %w", interpretSQLiteError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq        int
			name, file string
		)
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return fmt.Errorf("idemkit/server: NewSQLiteStore: %w", interpretSQLiteError(err))
		}
		if name != "main" || file == "" {
			continue
		}
		fi, err := os.Stat(file)
		if err != nil {
			return fmt.Errorf("idemkit/server: NewSQLiteStore: %w", err)
		}
		s.path, s.file = file, fi
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("idemkit/server: NewSQLiteStore: %w", interpretSQLiteError(err))
	}
	return nil
}

// checkFile fails closed when the database file the store was opened on is
// no longer the file at its path (replaced, restored from a backup, or
// deleted): the pool's connections keep writing the old, unlinked file,
// which no new connection or process would ever read again.
func (s *SQLiteStore) checkFile() error {
	if s.file == nil {
		return nil
	}
	fi, err := os.Stat(s.path)
	if err == nil && os.SameFile(fi, s.file) {
		return nil
	}
	cause := fmt.Errorf("%w: %s is no longer the file the store opened", ErrStoreReplaced, s.path)
	if err != nil {
		cause = fmt.Errorf("%w: %w", cause, err)
	}
	return wrapStoreError(ErrStoreUnavailable, "", cause)
}

// DB returns the database the store uses.
func (s *SQLiteStore) DB() *sql.DB { return s.db }

const (
	sqliteCreateMigrationsTable = `CREATE TABLE IF NOT EXISTS idempotency_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL
) STRICT`
	sqliteSelectMigrations = `SELECT version FROM idempotency_migrations`
	sqliteInsertMigration  = `INSERT INTO idempotency_migrations (version, name, applied_at) VALUES (?, ?, ?)`
)

// Migrate applies the embedded schema migrations that the database does not
// have yet, in one IMMEDIATE transaction, and records them in the table
// idempotency_migrations. It is idempotent, and safe when several processes
// call it at once: the transaction holds SQLite's write lock, so the others
// wait (up to the connection's busy_timeout) and then find nothing to do.
func (s *SQLiteStore) Migrate(ctx context.Context) error {
	migrations, err := loadMigrations("sqlite")
	if err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("idemkit/server: migrate SQLite: %w", interpretSQLiteError(err))
	}
	defer conn.Close()

	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("idemkit/server: migrate SQLite: begin: %w", interpretSQLiteError(err))
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()

	if _, err := conn.ExecContext(ctx, sqliteCreateMigrationsTable); err != nil {
		return fmt.Errorf("idemkit/server: migrate SQLite: %w", interpretSQLiteError(err))
	}
	applied, err := s.appliedMigrations(ctx, conn)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("idemkit/server: migrate SQLite: apply %s: %w", m.Name, interpretSQLiteError(err))
		}
		now := time.Now().UTC().Format(sqliteTimeFormat)
		if _, err := conn.ExecContext(ctx, sqliteInsertMigration, m.Version, m.Name, now); err != nil {
			return fmt.Errorf("idemkit/server: migrate SQLite: record %s: %w", m.Name, interpretSQLiteError(err))
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("idemkit/server: migrate SQLite: commit: %w", interpretSQLiteError(err))
	}
	committed = true
	return nil
}

func (s *SQLiteStore) appliedMigrations(ctx context.Context, conn *sql.Conn) (map[int]bool, error) {
	rows, err := conn.QueryContext(ctx, sqliteSelectMigrations)
	if err != nil {
		return nil, fmt.Errorf("idemkit/server: migrate SQLite: %w", interpretSQLiteError(err))
	}
	defer rows.Close()
	applied := make(map[int]bool)
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("idemkit/server: migrate SQLite: %w", interpretSQLiteError(err))
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemkit/server: migrate SQLite: %w", interpretSQLiteError(err))
	}
	return applied, nil
}

// sqliteQuerier is what *sql.DB and *sql.Tx have in common.
type sqliteQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const sqliteRecordColumns = `principal, endpoint, key, state, fingerprint, fingerprint_version, token,
    locked_until, response_status, response_headers, response_body, response_body_omitted, created_at, expires_at`

const (
	// sqliteClaim inserts a claim, or overwrites the existing row when it
	// has expired, or takes over an in-progress row whose lease ran out and
	// whose fingerprint matches. ?6 is now. No row returned means the live
	// row blocked the claim. created_at is kept on a takeover, so a
	// returned created_at before now tells a takeover from a fresh claim.
	sqliteClaim = `INSERT INTO idempotency_keys
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
VALUES (?1, ?2, ?3, 'in_progress', ?4, ?5, 1, ?7, ?6, ?8)
ON CONFLICT (principal, endpoint, key) DO UPDATE SET
    state = 'in_progress',
    fingerprint = excluded.fingerprint,
    fingerprint_version = excluded.fingerprint_version,
    token = idempotency_keys.token + 1,
    locked_until = excluded.locked_until,
    response_status = NULL,
    response_headers = NULL,
    response_body = NULL,
    response_body_omitted = 0,
    completed_at = NULL,
    created_at = CASE WHEN idempotency_keys.expires_at <= excluded.created_at
        THEN excluded.created_at ELSE idempotency_keys.created_at END,
    expires_at = excluded.expires_at
WHERE idempotency_keys.expires_at <= excluded.created_at
   OR (idempotency_keys.state = 'in_progress'
       AND idempotency_keys.locked_until <= excluded.created_at
       AND idempotency_keys.fingerprint = excluded.fingerprint
       AND idempotency_keys.fingerprint_version = excluded.fingerprint_version)
RETURNING token, created_at`

	sqliteGet = `SELECT ` + sqliteRecordColumns + `
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

// Claim implements Store.Claim. The claim is one INSERT ... ON CONFLICT DO
// UPDATE ... WHERE statement, committed on return. ctx cancels the statement.
//
// The claim first takes SQLite's write lock (BEGIN IMMEDIATE), waiting up
// to the connection's busy_timeout; the lease and the window start when the
// lock is held, not when the claim began to wait: after a wait of
// sqliteClaimShiftMin (100 ms) or more, req's times are moved by the wait,
// so that a short lease cannot lapse while the claim queues behind another
// writer.
func (s *SQLiteStore) Claim(ctx context.Context, req ClaimRequest) (res ClaimResult, err error) {
	if err := s.checkFile(); err != nil {
		return ClaimResult{}, err
	}
	if err := validateClaimRequest(req); err != nil {
		return ClaimResult{}, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return ClaimResult{}, interpretSQLiteError(err)
	}
	defer func() { err = errors.Join(err, s.closeConn(conn)) }()
	start := time.Now()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return ClaimResult{}, interpretSQLiteError(err)
	}
	if waited := time.Since(start); waited >= sqliteClaimShiftMin {
		req.Now, req.LockedUntil, req.ExpiresAt = req.Now.Add(waited), req.LockedUntil.Add(waited), req.ExpiresAt.Add(waited)
	}
	res, err = sqliteClaimOn(ctx, conn, req)
	if err != nil {
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("idemkit/server: roll back a failed claim: %w", interpretSQLiteError(rbErr)))
			s.discardConn(conn)
		}
		return ClaimResult{}, err
	}
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		s.discardConn(conn)
		return ClaimResult{}, interpretSQLiteError(err)
	}
	return res, nil
}

// sqliteClaimShiftMin is the shortest wait for the write lock that moves a
// claim's times: shorter waits are noise next to any lease, and leaving the
// times as given keeps them exactly the caller's.
const sqliteClaimShiftMin = 100 * time.Millisecond

// closeConn returns conn to the pool, reporting a failure.
func (s *SQLiteStore) closeConn(conn *sql.Conn) error {
	if err := conn.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("idemkit/server: return a connection to the pool: %w", err)
	}
	return nil
}

// discardConn makes the pool close conn instead of reusing it: its state
// (an open transaction, a changed busy_timeout) is unknown.
func (s *SQLiteStore) discardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

func sqliteClaimOn(ctx context.Context, q sqliteQuerier, req ClaimRequest) (ClaimResult, error) {
	if err := validateClaimRequest(req); err != nil {
		return ClaimResult{}, err
	}
	if y := req.ExpiresAt.UTC().Year(); y > 9999 || req.Now.UTC().Year() < 0 {
		return ClaimResult{}, errors.New("idemkit/server: ClaimRequest times must lie within the years 0000-9999")
	}
	now := sqliteTime(req.Now)
	for range claimAttemptsMax {
		var (
			token     int64
			createdAt string
		)
		err := q.QueryRowContext(ctx, sqliteClaim,
			req.Principal, req.Endpoint, req.Key, req.Fingerprint, req.FingerprintVersion,
			now, sqliteTime(req.LockedUntil), sqliteTime(req.ExpiresAt),
		).Scan(&token, &createdAt)
		if err == nil {
			return ClaimResult{Acquired: true, Token: token, TakenOver: token > 1 && createdAt != now}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return ClaimResult{}, interpretSQLiteError(err)
		}
		rec, err := sqliteGetOn(ctx, q, req.Scope, req.Now)
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
func (s *SQLiteStore) Get(ctx context.Context, sc Scope, now time.Time) (*Record, error) {
	if err := validateScope(sc); err != nil {
		return nil, err
	}
	if err := s.checkFile(); err != nil {
		return nil, err
	}
	return sqliteGetOn(ctx, s.db, sc, now)
}

func sqliteGetOn(ctx context.Context, q sqliteQuerier, sc Scope, now time.Time) (*Record, error) {
	row := q.QueryRowContext(ctx, sqliteGet, sc.Principal, sc.Endpoint, sc.Key, sqliteTime(now))
	var (
		rec         Record
		state       string
		lockedUntil sql.NullString
		status      sql.NullInt64
		headers     sql.NullString
		body        []byte
		omitted     int64
		createdAt   string
		expiresAt   string
	)
	err := row.Scan(&rec.Principal, &rec.Endpoint, &rec.Key, &state, &rec.Fingerprint, &rec.FingerprintVersion,
		&rec.Token, &lockedUntil, &status, &headers, &body, &omitted, &createdAt, &expiresAt)
	if err != nil {
		return nil, interpretSQLiteError(err)
	}
	rec.State = State(state)
	if rec.CreatedAt, err = parseSQLiteTime(createdAt); err != nil {
		return nil, err
	}
	if rec.ExpiresAt, err = parseSQLiteTime(expiresAt); err != nil {
		return nil, err
	}
	if lockedUntil.Valid {
		if rec.LockedUntil, err = parseSQLiteTime(lockedUntil.String); err != nil {
			return nil, err
		}
	}
	if rec.State == StateCompleted {
		h, err := decodeHeader([]byte(headers.String))
		if err != nil {
			return nil, err
		}
		if len(body) == 0 {
			body = nil
		}
		rec.Response = &StoredResponse{Status: int(status.Int64), Header: h, Body: body, BodyOmitted: omitted != 0}
	}
	return &rec, nil
}

// Complete implements Store.Complete. It returns ErrLeaseLost when the
// claim is no longer held with token (or the record expired at now).
func (s *SQLiteStore) Complete(ctx context.Context, sc Scope, token int64, now time.Time, resp *StoredResponse) error {
	if err := s.checkFile(); err != nil {
		return err
	}
	return sqliteCompleteOn(ctx, s.db, sc, token, now, resp)
}

func sqliteCompleteOn(ctx context.Context, q sqliteQuerier, sc Scope, token int64, now time.Time, resp *StoredResponse) error {
	if err := validateScope(sc); err != nil {
		return err
	}
	if err := validateResponse(resp); err != nil {
		return err
	}
	headers, err := encodeHeader(resp.Header)
	if err != nil {
		return err
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	omitted := 0
	if resp.BodyOmitted {
		omitted = 1
	}
	nowText := sqliteTime(now)
	res, err := q.ExecContext(ctx, sqliteComplete, resp.Status, string(headers), body, omitted, nowText,
		sc.Principal, sc.Endpoint, sc.Key, token, nowText)
	return sqliteExpectOneRow(res, err)
}

// Release implements Store.Release.
func (s *SQLiteStore) Release(ctx context.Context, sc Scope, token int64) error {
	if err := validateScope(sc); err != nil {
		return err
	}
	if err := s.checkFile(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, sqliteRelease, sc.Principal, sc.Endpoint, sc.Key, token)
	return sqliteExpectOneRow(res, err)
}

// ExtendLease implements Store.ExtendLease: locked_until becomes now plus
// lease.
func (s *SQLiteStore) ExtendLease(ctx context.Context, sc Scope, token int64, now time.Time, lease time.Duration) error {
	if err := validateScope(sc); err != nil {
		return err
	}
	if err := s.checkFile(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, sqliteExtendLease, sqliteTime(now.Add(lease)), sc.Principal, sc.Endpoint, sc.Key, token)
	return sqliteExpectOneRow(res, err)
}

// sqliteExpectOneRow turns a compare-and-set that changed no row into
// ErrLeaseLost.
func sqliteExpectOneRow(res sql.Result, err error) error {
	if err != nil {
		return interpretSQLiteError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretSQLiteError(err)
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// Sweep implements Store.Sweep. It deletes expired rows in chunks of
// SQLiteConfig.SweepChunkSize, each its own short write, until a chunk is
// short, and returns the total. ctx is checked between chunks and cancels
// the running chunk; rows deleted by earlier chunks stay deleted and are
// counted in the returned total, which comes with ctx's error.
func (s *SQLiteStore) Sweep(ctx context.Context, now time.Time) (int, error) {
	if err := s.checkFile(); err != nil {
		return 0, err
	}
	total := 0
	nowText := sqliteTime(now)
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		res, err := s.db.ExecContext(ctx, sqliteSweepChunk, nowText, s.cfg.SweepChunkSize)
		if err != nil {
			return total, interpretSQLiteError(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, interpretSQLiteError(err)
		}
		total += int(n)
		if int(n) < s.cfg.SweepChunkSize {
			return total, nil
		}
	}
}

// PrincipalUsage implements UsageReporter.
func (s *SQLiteStore) PrincipalUsage(ctx context.Context, principal string, now time.Time) (PrincipalUsage, error) {
	var (
		u      PrincipalUsage
		oldest sql.NullString
	)
	if err := s.checkFile(); err != nil {
		return PrincipalUsage{}, err
	}
	if err := s.db.QueryRowContext(ctx, sqliteUsage, principal, sqliteTime(now)).Scan(&u.Keys, &u.StoredBytes, &oldest); err != nil {
		return PrincipalUsage{}, interpretSQLiteError(err)
	}
	if oldest.Valid {
		t, err := parseSQLiteTime(oldest.String)
		if err != nil {
			return PrincipalUsage{}, err
		}
		u.OldestExpiresAt = t
	}
	return u, nil
}

// Stats returns the size of the store at now (see StoreStats).
func (s *SQLiteStore) Stats(ctx context.Context, now time.Time) (StoreStats, error) {
	var (
		st     StoreStats
		oldest sql.NullString
	)
	err := s.db.QueryRowContext(ctx, sqliteStats, sqliteTime(now)).Scan(&st.Rows, &st.Expired, &st.InProgress, &oldest)
	if err != nil {
		return StoreStats{}, interpretSQLiteError(err)
	}
	if oldest.Valid {
		if st.OldestCreatedAt, err = parseSQLiteTime(oldest.String); err != nil {
			return StoreStats{}, err
		}
	}
	return st, nil
}

// BeginTx implements Store.BeginTx. It takes a connection of its own and
// sets its busy_timeout to lockTimeout (SQLiteConfig.BusyTimeout when
// lockTimeout is 0) for the transaction's life, so a claim that waits longer
// for the write lock fails with ErrStoreBusy. ctx bounds only the start of
// the transaction; the caller must end it with Commit or Rollback.
//
// Handle returns the *sql.Tx.
func (s *SQLiteStore) BeginTx(ctx context.Context, lockTimeout time.Duration) (StoreTx, error) {
	if lockTimeout < 0 {
		return nil, fmt.Errorf("idemkit/server: BeginTx: negative lock timeout %v", lockTimeout)
	}
	if lockTimeout == 0 {
		lockTimeout = s.cfg.BusyTimeout
	}
	if err := s.checkFile(); err != nil {
		return nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, interpretSQLiteError(err)
	}
	var prevBusy int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&prevBusy); err != nil {
		return nil, errors.Join(interpretSQLiteError(err), s.closeConn(conn))
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", max(lockTimeout.Milliseconds(), 1))); err != nil {
		s.discardConn(conn) // the busy_timeout may or may not have changed
		return nil, errors.Join(interpretSQLiteError(err), s.closeConn(conn))
	}
	// The transaction must outlive a canceled request context: the caller
	// decides how it ends.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		err = interpretSQLiteError(err)
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", prevBusy)); rerr != nil {
			s.discardConn(conn)
			err = errors.Join(err, fmt.Errorf("idemkit/server: restore busy_timeout: %w", interpretSQLiteError(rerr)))
		}
		return nil, errors.Join(err, s.closeConn(conn))
	}
	return &sqliteTx{store: s, conn: conn, tx: tx, prevBusy: prevBusy}, nil
}

// sqliteTx is the StoreTx of SQLiteStore.
type sqliteTx struct {
	store    *SQLiteStore
	conn     *sql.Conn
	tx       *sql.Tx
	prevBusy int64

	mu     sync.Mutex
	done   bool
	scopes []Scope // claimed in this transaction, held in store.txScopes
}

// Claim implements StoreTx.Claim. A scope already claimed by another open
// transaction of this store fails at once with ErrInFlight.
func (t *sqliteTx) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if err := validateClaimRequest(req); err != nil {
		return ClaimResult{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ClaimResult{}, sql.ErrTxDone
	}
	if !t.store.holdTxScope(req.Scope) {
		return ClaimResult{}, fmt.Errorf("%w: claimed by an open transaction in this process", ErrInFlight)
	}
	res, err := sqliteClaimOn(ctx, t.tx, req)
	if err != nil || !res.Acquired {
		t.store.dropTxScopes([]Scope{req.Scope})
		return res, err
	}
	t.scopes = append(t.scopes, req.Scope)
	return res, nil
}

// Complete implements StoreTx.Complete.
func (t *sqliteTx) Complete(ctx context.Context, sc Scope, token int64, now time.Time, resp *StoredResponse) error {
	return sqliteCompleteOn(ctx, t.tx, sc, token, now, resp)
}

// Commit implements StoreTx.Commit. It rolls back instead, failing closed,
// if the database file was replaced under the store.
func (t *sqliteTx) Commit(ctx context.Context) error {
	if err := t.store.checkFile(); err != nil {
		return errors.Join(err, t.end(ctx, t.tx.Rollback))
	}
	return t.end(ctx, t.tx.Commit)
}

// Rollback implements StoreTx.Rollback. It is a no-op after Commit or
// Rollback.
func (t *sqliteTx) Rollback(ctx context.Context) error {
	return t.end(ctx, t.tx.Rollback)
}

func (t *sqliteTx) end(ctx context.Context, finish func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	t.done = true
	err := finish()
	// Only once the transaction has ended may another claim of its scopes
	// proceed.
	t.store.dropTxScopes(t.scopes)
	t.scopes = nil
	// A COMMIT or ROLLBACK that failed may have left the transaction open
	// (and the write lock held): the connection is discarded, which closes
	// it and so rolls the transaction back, rather than returned to the
	// pool; its busy_timeout no longer matters. The transaction's outcome is
	// err alone: a failure to tidy up the connection afterwards must not
	// turn a commit into an error, so it is logged, and a connection whose
	// busy_timeout could not be restored is discarded too.
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		t.store.discardConn(t.conn)
	} else if _, rerr := t.conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", t.prevBusy)); rerr != nil {
		t.store.discardConn(t.conn)
		t.store.cfg.Logger.WarnContext(ctx, "idemkit: could not restore busy_timeout after a transaction; the connection is discarded",
			"error", interpretSQLiteError(rerr))
	}
	if cerr := t.store.closeConn(t.conn); cerr != nil {
		t.store.cfg.Logger.WarnContext(ctx, "idemkit: could not return a transaction's connection to the pool", "error", cerr)
	}
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return interpretSQLiteError(err)
}

// Handle implements StoreTx.Handle: the *sql.Tx.
func (t *sqliteTx) Handle() any { return t.tx }

func (s *SQLiteStore) holdTxScope(sc Scope) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.txScopes[sc]; held {
		return false
	}
	s.txScopes[sc] = struct{}{}
	return true
}

func (s *SQLiteStore) dropTxScopes(scopes []Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range scopes {
		delete(s.txScopes, sc)
	}
}

// sqliteTime is the stored form of t.
func sqliteTime(t time.Time) string { return t.UTC().Format(sqliteTimeFormat) }

func parseSQLiteTime(s string) (time.Time, error) {
	t, err := time.Parse(sqliteTimeFormat, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("idemkit/server: stored timestamp %q: %w", s, err)
	}
	return t, nil
}
