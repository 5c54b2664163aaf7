// Package mysqlstore is the MySQL and MariaDB server.Store, on a
// database/sql pool of github.com/go-sql-driver/mysql: for teams whose
// database is MySQL 8 or MariaDB 10.11, safe for many server instances on
// one database.
//
//	db, err := sql.Open("mysql", "user:pass@tcp(db:3306)/app?interpolateParams=true")
//	store, err := mysqlstore.New(db, nil)
//	err = store.Migrate(ctx)
//	m, err := server.New(store, &server.Config{PrincipalFunc: principal})
//
// In transactional mode (server.ModeTransactional) a handler writes its
// effect on Tx(r.Context()), the *sql.Tx the response commits in.
//
// # The claim
//
// MySQL has no INSERT ... ON CONFLICT ... RETURNING. The claim is a plain
// INSERT whose duplicate-key error (1062) is caught and means "the scope is
// taken"; the record is then read. Never INSERT IGNORE: it turns every error
// of the row into a warning, data truncation included, so a truncated key
// would claim another scope. Not INSERT ... ON DUPLICATE KEY UPDATE either:
// its affected-rows count (1 inserted, 2 updated, 0 updated to the same
// values, and 1 for an update under CLIENT_FOUND_ROWS) would have to tell
// a fresh claim from a takeover, and it takes an exclusive lock on the
// existing row even when a replay only needs to read it. An expired record
// or a lapsed lease is overwritten by an UPDATE that decides under the row
// lock and hands back the new fencing token with LAST_INSERT_ID(token + 1).
//
// # The in-flight lookup
//
// MySQL has no partial index (PostgreSQL's ... WHERE state = 'in_progress').
// The store keeps a composite index on (state, locked_until) instead of a
// separate table of in-flight claims: the index is maintained by the
// claim's and the completion's own statements, atomically, whereas a
// claims table would cost two more row writes per request and a
// transaction around every claim to keep the two tables in step. In-flight
// rows are one contiguous range of the index, ordered by lease end, so
// counting them (Stats) or finding the lapsed leases reads that range
// only. On MariaDB 10.11, with 10,000 rows of which 100 are in flight:
//
//	EXPLAIN SELECT count(*) FROM idempotency_keys
//	    WHERE state = 'in_progress' AND locked_until <= UTC_TIMESTAMP(6);
//	type  key                                     key_len rows Extra
//	range idempotency_keys_state_locked_until_idx 27      100  Using where; Using index
//
//	EXPLAIN SELECT count(*) FROM idempotency_keys
//	    WHERE state = 'in_progress' AND expires_at > UTC_TIMESTAMP(6);
//	type  key                                     key_len rows Extra
//	ref   idempotency_keys_state_locked_until_idx 18      100  Using index condition; Using where
//
// The first is covered by the index alone; the second (Stats' in-flight
// count) reads the 100 in-flight rows, not the table.
//
// # Clocks, timeouts and errors
//
// The database's clock decides leases and expiry: every statement compares
// and computes with UTC_TIMESTAMP(6), the time the statement began, and
// takes only durations from the caller. Times are DATETIME(6) in UTC.
//
// In transactional mode innodb_lock_wait_timeout plays the part of
// PostgreSQL's lock_timeout: BeginTx sets it on the transaction's session
// (whole seconds, rounded up) and restores it afterwards, so a claim that
// waits longer on a concurrent uncommitted claim of the same scope fails
// with error 1205, server.ErrInFlight. A deadlock (1213) is
// server.ErrStoreBusy; InnoDB has rolled the transaction back. On MariaDB,
// BeginTx also sets max_statement_time and idle_transaction_timeout (see
// Config), as pgstore sets statement_timeout and
// idle_in_transaction_session_timeout; MySQL 8 has neither for writes.
//
// Errors are translated by MySQL error number (see interpretError); broken
// connections are server.ErrStoreUnavailable. go-sql-driver bounds no read
// or write by itself: set readTimeout and writeTimeout in the DSN so that a
// frozen network path cannot hold a request (or a COMMIT) forever, and
// interpolateParams=true to halve the round trips of every statement.
package mysqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// Defaults of Config and of BeginTx.
const (
	sweepChunkSizeDefault           = 200
	lockTimeoutDefault              = 3 * time.Second
	statementTimeoutDefault         = 30 * time.Second
	idleInTransactionTimeoutDefault = 60 * time.Second
)

// rollbackTimeout bounds a rollback whose context was canceled.
const rollbackTimeout = 5 * time.Second

// Config configures a Store. The zero value is valid.
type Config struct {
	// SweepChunkSize is the largest number of rows one DELETE of Sweep
	// removes; Sweep repeats chunks until one is short, pausing after each
	// for as long as it took. Defaults to 200.
	SweepChunkSize int
	// StatementTimeout is, on MariaDB, the max_statement_time of a
	// transactional-mode transaction's session (the handler's statements
	// have it too): a statement that runs longer is killed (error 1969,
	// server.ErrStoreUnavailable). MySQL 8 has no such bound for writes
	// (its max_execution_time covers SELECT only), so it is not set there.
	// Lease-mode statements are bounded by the caller's context. Defaults
	// to 30s.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is, on MariaDB, the idle_transaction_timeout
	// of a transactional-mode transaction's session (whole seconds, rounded
	// up): MariaDB ends the session of a transaction left idle longer (a
	// process that froze or lost its connection without closing it),
	// releasing its locks so that retries of the same key are not blocked.
	// MySQL 8 has no such timeout; there the session lasts until
	// wait_timeout. Defaults to 60s.
	IdleInTransactionTimeout time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	return sqlstore.ConfigWithDefaults(c, Config{
		SweepChunkSize:           sweepChunkSizeDefault,
		StatementTimeout:         statementTimeoutDefault,
		IdleInTransactionTimeout: idleInTransactionTimeoutDefault,
	})
}

// Store is a server.Store in MySQL or MariaDB. Its tables live in the
// pool's current database.
type Store struct {
	db  *sql.DB
	cfg *Config
	d   *dialect
	s   *sqlstore.Store
	q   *querier // db
	// flavor is what BeginTx found the server to be: flavorUnknown until
	// its first call.
	flavor atomic.Int32
}

var _ server.Store = (*Store)(nil)

func init() {
	prev := sqlstore.CallerClock
	sqlstore.CallerClock = func(st server.Store) bool {
		if s, ok := st.(*Store); ok {
			s.d.callerClock = true
			return true
		}
		return prev != nil && prev(st)
	}
}

// New returns a store on db, a pool of github.com/go-sql-driver/mysql.
// cfg may be nil. Call Migrate before first use.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("idemkit/server/mysqlstore: New: db is nil")
	}
	cfg = cfg.WithDefaults()
	if err := sqlstore.CheckNotNegative("idemkit/server/mysqlstore: Config", cfg); err != nil {
		return nil, err
	}
	d := &dialect{}
	s := sqlstore.New(d, cfg.SweepChunkSize)
	s.SweepPaced = true
	return &Store{db: db, cfg: cfg, d: d, s: s, q: &querier{q: db}}, nil
}

// DB returns the pool the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// Claim implements server.Store.Claim, each statement committed on its
// own: a plain INSERT claims a fresh scope in one statement; a duplicate
// key (1062) makes it read the record, and only an expired record or a
// lapsed lease of the same request takes a third statement, the UPDATE
// that overwrites it. ctx cancels the statement.
//
// req.Now only anchors req.LockedUntil and req.ExpiresAt, whose distances
// from it are the lease and the window.
func (s *Store) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	return s.claim(ctx, s.db, req)
}

// Get implements server.Store.Get. It returns server.ErrRecordNotFound when
// no record exists for sc or the record has expired.
func (s *Store) Get(ctx context.Context, sc server.Scope, now time.Time) (*server.Record, error) {
	return s.s.Get(ctx, s.q, sc, now)
}

// Complete implements server.Store.Complete. It returns
// server.ErrLeaseLost when the claim is no longer held with token (or the
// record expired).
func (s *Store) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	return s.s.Complete(ctx, s.q, sc, token, now, resp)
}

// Release implements server.Store.Release.
func (s *Store) Release(ctx context.Context, sc server.Scope, token int64) error {
	return s.s.Release(ctx, s.q, sc, token)
}

// ExtendLease implements server.Store.ExtendLease: locked_until becomes the
// database's UTC_TIMESTAMP(6) plus lease (now is not used).
//
// MySQL counts the rows an UPDATE changed, not those it matched (unless the
// DSN sets clientFoundRows), so an extension to the lease end the row
// already has changes nothing: that is told from a lost lease by reading
// whether the claim is still held.
func (s *Store) ExtendLease(ctx context.Context, sc server.Scope, token int64, now time.Time, lease time.Duration) error {
	err := s.s.ExtendLease(ctx, s.q, sc, token, now, lease)
	if !errors.Is(err, server.ErrLeaseLost) {
		return err
	}
	var held int
	if err := s.db.QueryRowContext(ctx, myHeld, sc.Principal, sc.Endpoint, sc.Key, token).Scan(&held); err != nil {
		return interpretError(err)
	}
	if held == 1 {
		return nil
	}
	return server.ErrLeaseLost
}

// Sweep implements server.Store.Sweep. It deletes expired rows in chunks of
// Config.SweepChunkSize, each its own DELETE ... ORDER BY expires_at LIMIT
// n, until a chunk is short, and returns the total. After each full chunk
// it pauses for as long as the chunk took, so that a sweep of a large
// backlog leaves most of the database's time to the claims. ctx is checked
// between chunks and cancels the running chunk; rows deleted by earlier
// chunks stay deleted and are counted in the returned total, which comes
// with ctx's error.
//
// A now in the past (the sweeper passes now minus its grace) deletes only
// rows that expired that long before the database's UTC_TIMESTAMP(6).
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	return s.s.Sweep(ctx, s.q, now)
}

// PrincipalUsage returns the live records of principal at now and the
// bytes of their stored responses, for the per-principal quotas
// (server.Config.MaxKeysPerPrincipal). It reads the principal's rows.
func (s *Store) PrincipalUsage(ctx context.Context, principal string, now time.Time) (server.PrincipalUsage, error) {
	return s.s.PrincipalUsage(ctx, s.q, principal, now)
}

// Stats returns the size of the store at now (see server.StoreStats). It
// counts every row: call it at metrics-scrape intervals, not per request.
func (s *Store) Stats(ctx context.Context, now time.Time) (server.StoreStats, error) {
	return s.s.Stats(ctx, s.q, now)
}

// migrations holds the versioned schema, NNN_description.up.sql, applied
// in order and recorded in the table idempotency_migrations.
//
//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies the embedded schema migrations that the database does not
// have yet and records them in the table idempotency_migrations. It is
// idempotent, and safe when several processes call it at once: a named lock
// (GET_LOCK, per database) makes them take turns. It refuses a database
// migrated by a newer release. MySQL commits each DDL statement at once, so
// a migration that fails halfway is not rolled back; the migrations are
// written so that running them again completes them.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	if _, err := migrate.Run(ctx, migrate.MySQLTarget(s.db, "idempotency_migrations", "idemkit/migrate/"), ms); err != nil {
		return fmt.Errorf("idemkit/server: migrate MySQL: %w", interpretError(err))
	}
	return nil
}
