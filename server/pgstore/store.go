// Package pgstore is the PostgreSQL server.Store, on a pgx v5 pool: the
// production store, safe for many server instances on one database.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	store, err := pgstore.New(pool, nil)
//	err = store.Migrate(ctx)
//	m, err := server.New(store, &server.Config{PrincipalFunc: principal})
//
// In transactional mode (server.ModeTransactional) a handler writes its
// effect on Tx(r.Context()), the transaction the response commits in.
//
// With Config.NotifyChanges, completions and releases are announced with
// LISTEN/NOTIFY and SubscribeChange wakes a duplicate request that waits
// for its original (server.Config.WaitInFlight) as soon as the original's
// record changes; without it, the waiting polls. Call Close to stop the
// listener connection SubscribeChange opens.
package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	// for as long as it took. Small chunks keep each one short next to a
	// claim's latency. Defaults to 200.
	SweepChunkSize int
	// StatementTimeout is the statement_timeout of a transactional-mode
	// transaction (SET LOCAL, so the handler's statements have it too): a
	// statement that runs longer is canceled by PostgreSQL. Lease-mode
	// statements run outside a transaction and are bounded by the caller's
	// context (server.Config.StoreTimeout), which makes pgx cancel them on
	// the server; to bound them on the server side too, set
	// statement_timeout on the pool (for example statement_timeout=5000 in
	// the DSN). Defaults to 30s.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of
	// a transactional-mode transaction: PostgreSQL ends the session of a
	// transaction left idle longer (a process that froze or lost its
	// connection without closing it), releasing its locks so that retries
	// of the same key are not blocked. Defaults to 60s.
	IdleInTransactionTimeout time.Duration
	// Partitioned makes the store run on a key table partitioned by UTC day
	// of creation, whose expired rows go by dropping whole partitions
	// instead of deleting rows: Migrate creates the partitioned table on a
	// fresh schema, ConvertToPartitioned converts a plain table with rows
	// online, and Sweep maintains the partitions (MaintainPartitions)
	// rather than deleting rows one by one. Claims take a transaction-scoped
	// advisory lock on their scope (a partitioned table cannot have the
	// unique key on the scope alone) and work on a plain table too, which
	// is how replicas move to a partitioned table without downtime: every
	// replica first runs with Partitioned on the plain table, then the
	// table is converted. Defaults to false.
	Partitioned bool
	// PartitionsAhead is how many days ahead of today MaintainPartitions
	// keeps partitions: a claim on a day that has no partition fails, so
	// the sweeper (which calls it) must run at least that often. Defaults
	// to 7.
	PartitionsAhead int
	// PartitionSweepRows makes Sweep on a partitioned table also delete the
	// expired rows of partitions it cannot drop yet, in chunks, as on the
	// plain table. Without it an expired row waits until its whole
	// partition expired: up to one day plus the grace past its expiry.
	// Defaults to false.
	PartitionSweepRows bool
	// NotifyChanges makes Complete and Release (and a transactional-mode
	// completion, on COMMIT) notify the record's scope with pg_notify, and
	// SubscribeChange listen for those notifications on a connection of its
	// own, so that a request waiting for an in-flight record
	// (server.Config.WaitInFlight) wakes as soon as it completes instead
	// of at its next poll. Set it on every replica: one without it neither
	// notifies nor listens. It is opt-in because PostgreSQL serialises the
	// commits of all transactions that notify (one lock for the whole
	// cluster, held through the commit's WAL flush): with 8 concurrent
	// writers a completion took 2-2.5 times as long (BENCHMARKS.md), while
	// a single writer saw no difference. Defaults to false.
	NotifyChanges bool
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	return sqlstore.ConfigWithDefaults(c, Config{
		SweepChunkSize:           sweepChunkSizeDefault,
		StatementTimeout:         statementTimeoutDefault,
		IdleInTransactionTimeout: idleInTransactionTimeoutDefault,
		PartitionsAhead:          partitionsAheadDefault,
	})
}

// Store is a server.Store in PostgreSQL. Its table lives in the pool's
// current schema (the first schema of search_path).
//
// The database's clock decides leases and expiry: every statement compares
// and computes with clock_timestamp() and takes only durations from the
// caller, so that replicas whose clocks disagree cannot take over each
// other's live leases.
//
// Errors are translated by SQLSTATE: a lock timeout (55P03) is
// server.ErrInFlight, serialization failures and deadlocks are
// server.ErrStoreBusy, a full disk is server.ErrStoreFull, and connection
// failures are server.ErrStoreUnavailable, each wrapping the pgx error.
type Store struct {
	pool *pgxpool.Pool
	cfg  *Config
	d    *dialect
	s    *sqlstore.Store
	// tx is the store of transactional-mode claims: the middleware has read
	// the record (Get) before it begins the transaction, so the claim is the
	// upsert alone, without the read of ClaimOrRead.
	tx *sqlstore.Store
	q  *querier // the pool
	// timeouts caches timeoutArgs.
	timeouts atomic.Pointer[timeouts]
	// listen is SubscribeChange's listener, started on first use.
	listenMu     sync.Mutex
	listen       *listener
	listenClosed bool
}

var (
	_ server.Store = (*Store)(nil)
)

func init() {
	prev := sqlstore.CallerClock // another driver's, when both are linked
	sqlstore.CallerClock = func(st server.Store) bool {
		if s, ok := st.(*Store); ok {
			s.d.callerClock = true
			return true
		}
		return prev != nil && prev(st)
	}
}

// New returns a store on pool. cfg may be nil. Call Migrate before first
// use.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("idemkit/server/pgstore: New: pool is nil")
	}
	cfg = cfg.WithDefaults()
	if err := sqlstore.CheckNotNegative("idemkit/server/pgstore: Config", cfg); err != nil {
		return nil, err
	}
	d := &dialect{}
	var sd sqlstore.Dialect = d
	if cfg.Partitioned {
		sd = partDialect{Dialect: d, d: d}
	}
	txd := txDialect{sd}
	if cfg.NotifyChanges {
		sd = withNotify(sd)
	}
	s := sqlstore.New(sd, cfg.SweepChunkSize)
	s.SweepPaced = true
	return &Store{pool: pool, cfg: cfg, d: d, s: s, tx: sqlstore.New(txd, cfg.SweepChunkSize),
		q: &querier{q: pool}}, nil
}

// txDialect is the dialect without its ClaimReader capability.
type txDialect struct{ sqlstore.Dialect }

// TxClaimAnswersReplays reports that the first Claim of a transaction from
// BeginTx answers a live completed record itself, in the round trip that
// begins the transaction, so that the transactional middleware does not
// take a read of its own before every claim.
func (s *Store) TxClaimAnswersReplays() bool { return true }

// Pool returns the pool the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Claim implements server.Store.Claim, committed on return. A fresh scope
// is claimed, and a live record read, by one INSERT ... ON CONFLICT DO
// NOTHING statement that locks and writes nothing when the row exists, so a
// replay is a plain read; only an expired row or a lapsed lease takes a
// second statement, the INSERT ... ON CONFLICT DO UPDATE ... WHERE that
// overwrites it. ctx cancels the statement.
//
// req.Now only anchors req.LockedUntil and req.ExpiresAt, whose distances
// from it are the lease and the window.
func (s *Store) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	if s.cfg.Partitioned {
		return s.s.Claim(ctx, s.q, req)
	}
	if err := sqlstore.ValidateClaimRequest(req); err != nil {
		return server.ClaimResult{}, err
	}
	if res, decided, err := s.claimLive(ctx, req); decided {
		return res, err
	}
	return s.s.Claim(ctx, s.q, req)
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
// database's clock_timestamp() plus lease (now is not used).
func (s *Store) ExtendLease(ctx context.Context, sc server.Scope, token int64, now time.Time, lease time.Duration) error {
	return s.s.ExtendLease(ctx, s.q, sc, token, now, lease)
}

// Sweep implements server.Store.Sweep. It deletes expired rows in chunks of
// Config.SweepChunkSize, each its own short transaction that skips rows
// locked by a concurrent claim, until a chunk is short, and returns the
// total. After each full chunk it pauses for as long as the chunk took, so
// that a sweep of a large backlog takes at most half of one connection's
// time and the claims keep their latency (on 2 cores, deleting 1,000,000
// rows took 33-46 s, 2.2-3.7 times as long as unpaced 1,000-row chunks; see
// BENCHMARKS.md). ctx is checked between chunks and cancels the running chunk; rows
// deleted by earlier chunks stay deleted and are counted in the returned
// total, which comes with ctx's error.
//
// Rows expired less than server.SweepGrace before now are kept. The
// database's clock_timestamp() decides; now only says how far in the past
// to look: a now d before the host's time deletes only rows that expired
// d plus the grace before the database's clock.
//
// With Config.Partitioned it maintains the partitions instead
// (MaintainPartitions, given now less server.SweepGrace) and returns the
// rows of the partitions it dropped; it deletes rows one by one only with
// Config.PartitionSweepRows (or on a plain table).
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	if !s.cfg.Partitioned {
		return s.s.Sweep(ctx, s.q, now)
	}
	rep, err := s.MaintainPartitions(ctx, now.Add(-server.SweepGrace))
	if err != nil && ctx.Err() != nil {
		return int(rep.DroppedRows), err
	}
	part, perr := s.partitioned(ctx, s.pool)
	if perr != nil {
		return int(rep.DroppedRows), errors.Join(err, perr)
	}
	if !part || s.cfg.PartitionSweepRows {
		n, serr := s.s.Sweep(ctx, s.q, now)
		return int(rep.DroppedRows) + n, errors.Join(err, serr)
	}
	return int(rep.DroppedRows), err
}

// PrincipalUsage returns the live records of principal at now and the
// bytes of their stored responses, for the per-principal quotas
// (server.Config.MaxKeysPerPrincipal). It reads the principal's rows.
func (s *Store) PrincipalUsage(ctx context.Context, principal string, now time.Time) (server.PrincipalUsage, error) {
	return s.s.PrincipalUsage(ctx, s.q, principal, now)
}

// Stats returns the size and health of the store at now (see
// server.StoreStats). It scans the table twice: call it at metrics-scrape
// intervals, not per request.
func (s *Store) Stats(ctx context.Context, now time.Time) (server.StoreStats, error) {
	st, err := s.s.Stats(ctx, s.q, now)
	if err != nil {
		return server.StoreStats{}, err
	}
	st.StoreHealth, err = s.health(ctx, now)
	return st, err
}

// migrations holds the versioned schema, NNN_description.up.sql, applied
// in order and recorded in the table idempotency_migrations.
//
//go:embed migrations/*.sql
var migrations embed.FS

const (
	// migrateLock serialises Migrate calls on one schema across processes.
	migrateLock           = `SELECT pg_advisory_xact_lock(hashtextextended('idemkit/migrate/' || current_schema(), 0))`
	createMigrationsTable = `CREATE TABLE IF NOT EXISTS idempotency_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	currentMigration = `SELECT coalesce(max(version), 0) FROM idempotency_migrations`
	insertMigration  = `INSERT INTO idempotency_migrations (version, name) VALUES ($1, $2)`
)

// Migrate applies the embedded schema migrations that the schema does not
// have yet, in one transaction, and records them in the table
// idempotency_migrations. It is idempotent, and safe when several processes
// call it at once: a transaction-scoped advisory lock (per schema) makes them
// take turns. It refuses a schema migrated by a newer release.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	if _, err := migrate.Run(ctx, &migrationTarget{pool: s.pool}, ms); err != nil {
		return fmt.Errorf("idemkit/server: migrate PostgreSQL: %w", err)
	}
	if s.cfg.Partitioned {
		return s.migratePartitioned(ctx)
	}
	return nil
}

// migrationTarget is the schema as the migration runner sees it: one
// transaction holding the advisory lock.
type migrationTarget struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (t *migrationTarget) Lock(ctx context.Context) (int, error) {
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return 0, interpretError(err)
	}
	t.tx = tx
	var current int
	err = func() error {
		for _, q := range []string{migrateLock, createMigrationsTable} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, currentMigration).Scan(&current)
	}()
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return 0, interpretError(err)
	}
	return current, nil
}

func (t *migrationTarget) Apply(ctx context.Context, m migrate.Migration) error {
	if _, err := t.tx.Exec(ctx, m.SQL); err != nil {
		return fmt.Errorf("apply %s: %w", m.Name, interpretError(err))
	}
	if _, err := t.tx.Exec(ctx, insertMigration, m.Version, m.Name); err != nil {
		return fmt.Errorf("record %s: %w", m.Name, interpretError(err))
	}
	return nil
}

func (t *migrationTarget) Unlock(ctx context.Context, err error) error {
	if err != nil {
		_ = t.tx.Rollback(context.WithoutCancel(ctx))
		return nil
	}
	if err := t.tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", interpretError(err))
	}
	return nil
}
