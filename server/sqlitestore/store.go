// Package sqlitestore is the SQLite server.Store, on a database/sql
// database opened with modernc.org/sqlite (no cgo): for a single node, the
// embedded default and the demo.
//
//	db, err := sqlitestore.Open(ctx, "idem.db")
//	store, err := sqlitestore.New(db, nil)
//	err = store.Migrate(ctx)
//	m, err := server.New(store, &server.Config{PrincipalFunc: principal})
//
// In transactional mode (server.ModeTransactional) a handler writes its
// effect on Tx(r.Context()), the transaction the response commits in.
package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver used by Open

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// ErrFileReplaced means the database file was replaced, restored or
// deleted under a running Store: its connections still use the old file, so
// every operation fails closed with an error wrapping ErrFileReplaced and
// server.ErrStoreUnavailable (HTTP: 503) until the process reopens the
// database.
var ErrFileReplaced = errors.New("idemkit/server/sqlitestore: database file replaced under the running store")

// sweepChunkSizeDefault is the default Config.SweepChunkSize.
const sweepChunkSizeDefault = 1000

// busyTimeoutDefault is how long a transactional-mode claim waits for
// SQLite's write lock when BeginTx is given no lock timeout.
const busyTimeoutDefault = 3 * time.Second

// openBusyTimeout is the busy_timeout Open sets on every connection: how
// long a statement waits for the write lock before it fails with
// SQLITE_BUSY (server.ErrStoreBusy).
const openBusyTimeout = 5000 * time.Millisecond

// Config configures a Store. The zero value is valid.
type Config struct {
	// SweepChunkSize is the largest number of rows one DELETE of Sweep
	// removes; Sweep repeats chunks until one is short. Defaults to
	// 1000.
	SweepChunkSize int
	// Logger receives warnings about cleanup that failed after the outcome
	// of an operation was decided (a connection that could not be reset).
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	return sqlstore.ConfigWithDefaults(c, Config{
		SweepChunkSize: sweepChunkSizeDefault,
		Logger:         slog.Default(),
	})
}

// Store is a server.Store in an SQLite database, for a single node: the
// embedded default and the demo. It has the same semantics as pgstore.Store,
// by the caller's clock.
//
// SQLite has one writer at a time. A statement that cannot get the write lock
// within the connection's busy_timeout fails with server.ErrStoreBusy. Use
// Open, or open the database yourself in WAL mode with a busy_timeout
// and synchronous=FULL. Do not limit the pool to one connection
// (SetMaxOpenConns(1)) when you use transactional mode: an open transaction
// holds its connection until it ends, and every other request would queue
// behind it.
//
// In transactional mode the claim is the first statement of the transaction,
// so it takes the write lock. The store remembers, per process, which scopes
// an open transaction has claimed, and answers a second transactional claim
// of such a scope with server.ErrInFlight at once instead of waiting for the lock.
type Store struct {
	db  *sql.DB
	cfg *Config
	s   *sqlstore.Store
	q   *querier // db

	mu       sync.Mutex
	txScopes map[server.Scope]struct{} // scopes claimed by an open server.StoreTx

	// path and file identify the database file the store was opened on
	// (nil file for an in-memory database): a file replaced under it is
	// detected and the store fails closed.
	path string
	file os.FileInfo
}

var (
	_ server.Store = (*Store)(nil)
)

// Open opens the SQLite database at path with modernc.org/sqlite,
// creating the file if needed, and configures every connection for this
// store: WAL journal, synchronous=FULL, a busy_timeout of 5 s, and foreign
// keys on. It pings the database, so a file that is not an SQLite database
// fails here with an error wrapping server.ErrStoreUnavailable. ctx bounds only the
// opening; close the returned *sql.DB when done.
//
// A file Open creates is readable and writable by its owner alone (0600,
// less the umask): it holds principals, keys and stored responses. SQLite
// gives its WAL and shared-memory files (path-wal, path-shm) the mode of
// the database file. The mode of an existing file is left as it is.
//
// You may instead open the database yourself and pass it to New.
func Open(ctx context.Context, path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("idemkit/server: Open: path is empty")
	}
	if err := createOwnerOnly(path); err != nil {
		return nil, fmt.Errorf("idemkit/server: open SQLite database %q: %w: %w", path, server.ErrStoreUnavailable, err)
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", openBusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("idemkit/server: open SQLite database %q: %w", path, interpretError(err))
	}
	// Reading the schema makes SQLite read the file header, so a file that
	// is not a database fails now rather than at the first claim.
	if err := readSchema(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("idemkit/server: open SQLite database %q: %w", path, err)
	}
	return db, nil
}

// fileModeDefault is the mode Open creates a database file with.
const fileModeDefault os.FileMode = 0o600

// createOwnerOnly creates path, empty, with fileModeDefault if no file
// exists there (SQLite takes an empty file for an empty database), so that
// the file SQLite would create 0644, and the WAL and shared-memory files it
// creates with the database file's mode, are owner-only. A file that
// exists, or that another process creates first, is left alone.
func createOwnerOnly(path string) error {
	if path == ":memory:" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileModeDefault)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// readSchema reads the schema on a new connection of db. Processes that
// open a new file at once race to switch it to WAL, which needs the
// exclusive lock and may fail with SQLITE_BUSY without waiting for the busy
// timeout: that is retried, for at most openBusyTimeout.
func readSchema(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(openBusyTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		var n int
		err := interpretError(db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n))
		if err == nil || !errors.Is(err, server.ErrStoreBusy) || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// New returns a store on db, which must be an SQLite database
// opened with modernc.org/sqlite (see Open). cfg may be nil. Call
// Migrate before first use.
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("idemkit/server: New: db is nil")
	}
	cfg = cfg.WithDefaults()
	if err := sqlstore.CheckNotNegative("idemkit/server/sqlitestore: Config", cfg); err != nil {
		return nil, err
	}
	s := &Store{db: db, cfg: cfg, s: sqlstore.New(dialect{}, cfg.SweepChunkSize), q: &querier{q: db}, txScopes: make(map[server.Scope]struct{})}
	if err := s.identifyFile(); err != nil {
		return nil, err
	}
	return s, nil
}

// identifyFile records which file the main database is, by PRAGMA
// database_list and os.Stat.
func (s *Store) identifyFile() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return fmt.Errorf("idemkit/server: New: %w", interpretError(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq        int
			name, file string
		)
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return fmt.Errorf("idemkit/server: New: %w", interpretError(err))
		}
		if name != "main" || file == "" {
			continue
		}
		fi, err := os.Stat(file)
		if err != nil {
			return fmt.Errorf("idemkit/server: New: %w", err)
		}
		s.path, s.file = file, fi
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("idemkit/server: New: %w", interpretError(err))
	}
	return nil
}

// checkFile fails closed when the database file the store was opened on is
// no longer the file at its path (replaced, restored from a backup, or
// deleted): the pool's connections keep writing the old, unlinked file,
// which no new connection or process would ever read again.
func (s *Store) checkFile() error {
	if s.file == nil {
		return nil
	}
	fi, err := os.Stat(s.path)
	if err == nil && os.SameFile(fi, s.file) {
		return nil
	}
	cause := fmt.Errorf("%w: %s is no longer the file the store opened", ErrFileReplaced, s.path)
	if err != nil {
		cause = fmt.Errorf("%w: %w", cause, err)
	}
	return sqlstore.WrapError(server.ErrStoreUnavailable, "", cause)
}

// DB returns the database the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// migrations holds the versioned schema, NNN_description.up.sql, applied
// in order and recorded in the table idempotency_migrations.
//
//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies the embedded schema migrations that the database does not
// have yet, in one IMMEDIATE transaction, and records them in the table
// idempotency_migrations. It is idempotent, and safe when several processes
// call it at once: the transaction holds SQLite's write lock, so the others
// wait (up to the connection's busy_timeout) and then find nothing to do.
// It refuses a database migrated by a newer release.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrate.Load(migrations, "migrations")
	if err != nil {
		return err
	}
	if _, err := migrate.Run(ctx, migrate.SQLTarget(s.db, "idempotency_migrations", time.Now), ms); err != nil {
		return fmt.Errorf("idemkit/server: migrate SQLite: %w", interpretError(err))
	}
	return nil
}

// checkClaim validates req, whose times must also fit the stored form.
func checkClaim(req server.ClaimRequest) error {
	if err := sqlstore.ValidateClaimRequest(req); err != nil {
		return err
	}
	if y := req.ExpiresAt.UTC().Year(); y > 9999 || req.Now.UTC().Year() < 0 {
		return errors.New("idemkit/server: ClaimRequest times must lie within the years 0000-9999")
	}
	return nil
}

// Get implements server.Store.Get. It returns server.ErrRecordNotFound when
// no record exists for sc or the record has expired at now.
func (s *Store) Get(ctx context.Context, sc server.Scope, now time.Time) (*server.Record, error) {
	if err := sqlstore.ValidateScope(sc); err != nil {
		return nil, err
	}
	if err := s.checkFile(); err != nil {
		return nil, err
	}
	return s.s.Get(ctx, s.q, sc, now)
}

// Complete implements server.Store.Complete. It returns
// server.ErrLeaseLost when the claim is no longer held with token (or the
// record expired at now).
func (s *Store) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	if err := s.checkFile(); err != nil {
		return err
	}
	return s.s.Complete(ctx, s.q, sc, token, now, resp)
}

// Release implements server.Store.Release.
func (s *Store) Release(ctx context.Context, sc server.Scope, token int64) error {
	if err := sqlstore.ValidateScope(sc); err != nil {
		return err
	}
	if err := s.checkFile(); err != nil {
		return err
	}
	return s.s.Release(ctx, s.q, sc, token)
}

// ExtendLease implements server.Store.ExtendLease: locked_until becomes now
// plus lease.
func (s *Store) ExtendLease(ctx context.Context, sc server.Scope, token int64, now time.Time, lease time.Duration) error {
	if err := sqlstore.ValidateScope(sc); err != nil {
		return err
	}
	if err := s.checkFile(); err != nil {
		return err
	}
	return s.s.ExtendLease(ctx, s.q, sc, token, now, lease)
}

// Sweep implements server.Store.Sweep. It deletes rows expired
// server.SweepGrace or more before now in chunks of Config.SweepChunkSize,
// each its own short write, until a chunk is short, and returns the total. ctx is checked between chunks and cancels the
// running chunk; rows deleted by earlier chunks stay deleted and are
// counted in the returned total, which comes with ctx's error.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	if err := s.checkFile(); err != nil {
		return 0, err
	}
	return s.s.Sweep(ctx, s.q, now)
}

// PrincipalUsage returns the live records of principal at now and the
// bytes of their stored responses, for the per-principal quotas
// (server.Config.MaxKeysPerPrincipal). It reads the principal's rows.
func (s *Store) PrincipalUsage(ctx context.Context, principal string, now time.Time) (server.PrincipalUsage, error) {
	if err := s.checkFile(); err != nil {
		return server.PrincipalUsage{}, err
	}
	return s.s.PrincipalUsage(ctx, s.q, principal, now)
}

// Stats returns the size and health of the store at now (see
// server.StoreStats).
func (s *Store) Stats(ctx context.Context, now time.Time) (server.StoreStats, error) {
	st, err := s.s.Stats(ctx, s.q, now)
	if err != nil {
		return server.StoreStats{}, err
	}
	st.StoreHealth, err = s.health(ctx, now)
	return st, err
}

// Tx returns the transaction of a transactional-mode request on a Store:
// the *sql.Tx on the store's database. The handler writes its effect on
// it; the middleware stores the response in it and commits. The handler
// must not commit or roll it back.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	h, _ := server.TxHandle(ctx)
	tx, ok := h.(*sql.Tx)
	return tx, ok
}

// Claim implements server.Store.Claim. The claim is one INSERT ... ON CONFLICT DO
// UPDATE ... WHERE statement, committed on return. ctx cancels the statement.
//
// The claim first takes SQLite's write lock (BEGIN IMMEDIATE), waiting up
// to the connection's busy_timeout; the lease and the window start when the
// lock is held, not when the claim began to wait: after a wait of
// claimShiftMin (100 ms) or more, req's times are moved by the wait,
// so that a short lease cannot lapse while the claim queues behind another
// writer, and the result reports the wait as its LeaseDelay.
func (s *Store) Claim(ctx context.Context, req server.ClaimRequest) (res server.ClaimResult, err error) {
	if err := s.checkFile(); err != nil {
		return server.ClaimResult{}, err
	}
	if err := checkClaim(req); err != nil {
		return server.ClaimResult{}, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return server.ClaimResult{}, interpretError(err)
	}
	defer func() { err = errors.Join(err, s.closeConn(conn)) }()
	start := time.Now()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return server.ClaimResult{}, interpretError(err)
	}
	var shift time.Duration
	if waited := time.Since(start); waited >= claimShiftMin {
		shift = waited
		req.Now, req.LockedUntil, req.ExpiresAt = req.Now.Add(waited), req.LockedUntil.Add(waited), req.ExpiresAt.Add(waited)
	}
	res, err = s.s.Claim(ctx, &querier{q: conn}, req)
	if res.Acquired {
		res.LeaseDelay = shift
	}
	if err != nil {
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("idemkit/server: roll back a failed claim: %w", interpretError(rbErr)))
			s.discardConn(conn)
		}
		return server.ClaimResult{}, err
	}
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		s.discardConn(conn)
		return server.ClaimResult{}, interpretError(err)
	}
	return res, nil
}

// claimShiftMin is the shortest wait for the write lock that moves a
// claim's times: shorter waits are noise next to any lease, and leaving the
// times as given keeps them exactly the caller's.
const claimShiftMin = 100 * time.Millisecond

// closeConn returns conn to the pool, reporting a failure.
func (s *Store) closeConn(conn *sql.Conn) error {
	if err := conn.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("idemkit/server: return a connection to the pool: %w", err)
	}
	return nil
}

// discardConn makes the pool close conn instead of reusing it: its state
// (an open transaction, a changed busy_timeout) is unknown.
func (s *Store) discardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

// BeginTx implements server.Store.BeginTx. It takes a connection of its own and
// sets its busy_timeout to lockTimeout (3s when
// lockTimeout is 0) for the transaction's life, so a claim that waits longer
// for the write lock fails with server.ErrStoreBusy. ctx bounds only the start of
// the transaction; the caller must end it with Commit or Rollback.
//
// Handle returns the *sql.Tx.
func (s *Store) BeginTx(ctx context.Context, lockTimeout time.Duration) (server.StoreTx, error) {
	if lockTimeout < 0 {
		return nil, fmt.Errorf("idemkit/server: BeginTx: negative lock timeout %v", lockTimeout)
	}
	if lockTimeout == 0 {
		lockTimeout = busyTimeoutDefault
	}
	if err := s.checkFile(); err != nil {
		return nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, interpretError(err)
	}
	var prevBusy int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&prevBusy); err != nil {
		return nil, errors.Join(interpretError(err), s.closeConn(conn))
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", max(lockTimeout.Milliseconds(), 1))); err != nil {
		s.discardConn(conn) // the busy_timeout may or may not have changed
		return nil, errors.Join(interpretError(err), s.closeConn(conn))
	}
	// The transaction must outlive a canceled request context: the caller
	// decides how it ends.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		err = interpretError(err)
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", prevBusy)); rerr != nil {
			s.discardConn(conn)
			err = errors.Join(err, fmt.Errorf("idemkit/server: restore busy_timeout: %w", interpretError(rerr)))
		}
		return nil, errors.Join(err, s.closeConn(conn))
	}
	return &sqliteTx{store: s, conn: conn, tx: tx, q: &querier{q: tx}, prevBusy: prevBusy}, nil
}

// sqliteTx is the server.StoreTx of Store.
type sqliteTx struct {
	store    *Store
	conn     *sql.Conn
	tx       *sql.Tx
	q        *querier // tx
	prevBusy int64

	mu     sync.Mutex
	done   bool
	scopes []server.Scope // claimed in this transaction, held in store.txScopes
}

// Claim implements server.StoreTx.Claim. A scope already claimed by another open
// transaction of this store fails at once with server.ErrInFlight.
func (t *sqliteTx) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	if err := checkClaim(req); err != nil {
		return server.ClaimResult{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return server.ClaimResult{}, sql.ErrTxDone
	}
	if !t.store.holdTxScope(req.Scope) {
		return server.ClaimResult{}, fmt.Errorf("%w: claimed by an open transaction in this process", server.ErrInFlight)
	}
	res, err := t.store.s.Claim(ctx, t.q, req)
	if err != nil || !res.Acquired {
		t.store.dropTxScopes([]server.Scope{req.Scope})
		return res, err
	}
	t.scopes = append(t.scopes, req.Scope)
	return res, nil
}

// Complete implements server.StoreTx.Complete.
func (t *sqliteTx) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	return t.store.s.Complete(ctx, t.q, sc, token, now, resp)
}

// Commit implements server.StoreTx.Commit. It rolls back instead, failing closed,
// if the database file was replaced under the store.
func (t *sqliteTx) Commit(ctx context.Context) error {
	if err := t.store.checkFile(); err != nil {
		return errors.Join(err, t.end(ctx, t.tx.Rollback))
	}
	return t.end(ctx, t.tx.Commit)
}

// Rollback implements server.StoreTx.Rollback. It is a no-op after Commit or
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
			"error", interpretError(rerr))
	}
	if cerr := t.store.closeConn(t.conn); cerr != nil {
		t.store.cfg.Logger.WarnContext(ctx, "idemkit: could not return a transaction's connection to the pool", "error", cerr)
	}
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return interpretError(err)
}

// Handle implements server.StoreTx.Handle: the *sql.Tx.
func (t *sqliteTx) Handle() any { return t.tx }

func (s *Store) holdTxScope(sc server.Scope) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, held := s.txScopes[sc]; held {
		return false
	}
	s.txScopes[sc] = struct{}{}
	return true
}

func (s *Store) dropTxScopes(scopes []server.Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range scopes {
		delete(s.txScopes, sc)
	}
}
