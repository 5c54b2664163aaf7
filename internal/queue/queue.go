package queue

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
)

// Queue is the SQLite side of a client. Every write goes through wmu, so this
// process never contends with itself for SQLite's single write lock (which
// would cost busy-handler sleeps); other processes are handled by the busy
// timeout and BEGIN IMMEDIATE.
type Queue struct {
	db  *sql.DB
	wmu sync.Mutex
	cfg Config
	// self is this client's instance, "host|path", written with every
	// intent it queues; origin is the instance the queue recorded first
	// (see instance.go).
	self, origin string
	// genPath is the -generation file next to the queue (generation.go).
	genPath string
	// wal is set when the queue is in WAL mode, where a commit with
	// synchronous=NORMAL can be lost to a power cut but never corrupts.
	wal bool
	// writer is the connection write transactions run on when
	// cfg.HoldWriter is set, and insertOne the insert of one intent
	// prepared on it (SQLite takes longer to prepare that statement than
	// to run it); nil before the first write and after a failed one.
	// Guarded by wmu.
	writer    *sql.Conn
	insertOne *sql.Stmt

	// Batches counts group commits; Waiting counts Submit calls waiting for
	// one (both for tests and the curious).
	Batches atomic.Int64
	Waiting atomic.Int64
	// Commits counts the write transactions committed.
	Commits atomic.Int64
	// SyncedCommits counts the commits made with the connection's own
	// synchronous level (FULL: one fsync each); the others are relaxed.
	SyncedCommits atomic.Int64
}

// Config is what a Queue is given: it knows nothing else of its client.
type Config struct {
	// BusyRetry, when positive, is how long BEGIN IMMEDIATE is retried in Go
	// while another process holds the write lock. Open sets it and keeps
	// SQLite's own busy handler short: that handler backs off to 100 ms
	// sleeps, so a process polling through it loses the lock, over and over,
	// to a busy neighbour; short jittered retries here keep two processes
	// sharing a queue fair.
	BusyRetry time.Duration
	// Owner is this process's lease owner (see Owner), written with every
	// lease it takes or renews.
	Owner string
	// HoldWriter keeps one connection of db for the queue's writes, with
	// the statements prepared on it, from the first write until Close.
	// Only for a pool of the queue's own with room for readers beside it
	// (Open's): on a pool of one connection every read would wait for it.
	HoldWriter bool
	// PerHour is the attempt budget (Config.MaxAttemptsPerHour), checked by
	// every claim.
	PerHour int
	// Window and Safety are the client's Config.Window and SafetyMargin,
	// and Hosts its profiles: a claim computes the horizon of the intent
	// it takes from them (policy.NewHorizon) and fixes how its key travels
	// (policy.KeyForm).
	Window, Safety time.Duration
	Hosts          policy.Hosts
}

// New returns a Queue on db. Call Migrate, then Locate, before anything
// else.
func New(db *sql.DB, cfg Config) *Queue { return &Queue{db: db, cfg: cfg} }

// DB is the database the queue lives in.
func (q *Queue) DB() *sql.DB { return q.db }

// Owner is the lease owner this queue writes.
func (q *Queue) Owner() string { return q.cfg.Owner }

// Self is this client's instance, "host|path"; Origin the one the queue
// recorded first.
func (q *Queue) Self() string   { return q.self }
func (q *Queue) Origin() string { return q.origin }

// LockWrites holds this process's write lock until UnlockWrites (tests
// hold writes back with it).
func (q *Queue) LockWrites()   { q.wmu.Lock() }
func (q *Queue) UnlockWrites() { q.wmu.Unlock() }

// skipJSON is the JSON array of the ids a claim passes over.
func skipJSON(ids []string) string {
	if len(ids) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

// execer is what *sql.Conn and *sql.Tx have in common.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// InTx runs fn in a BEGIN IMMEDIATE transaction on a connection of its own:
// the write lock is taken at BEGIN, so a read in fn can never be invalidated
// by another writer (no SQLITE_BUSY_SNAPSHOT). It commits if fn returns nil
// and rolls back on an error or a panic.
func (q *Queue) InTx(ctx context.Context, fn func(ex execer) error) (err error) {
	return q.tx(ctx, false, fn)
}

// tx is InTx; with relaxed, on a queue in WAL mode, the commit is made with
// synchronous=NORMAL (no fsync: durable against a crash of the process,
// not against a power cut; see finish) and the connection's level is put
// back afterwards.
func (q *Queue) tx(ctx context.Context, relaxed bool, fn func(ex execer) error) (err error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	conn, err := q.writeConn(ctx)
	if err != nil {
		return Interpret(err)
	}
	defer func() { q.releaseConn(conn, err) }()
	relaxed = relaxed && q.wal
	if relaxed {
		var level int
		if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level); err != nil {
			return Interpret(err)
		}
		if level <= 1 {
			relaxed = false // NORMAL or OFF already: the caller's choice
		} else {
			if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
				return Interpret(err)
			}
			defer func() {
				if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = "+strconv.Itoa(level)); rerr != nil {
					q.discardConn(conn)
				}
			}()
		}
	}
	if err := q.begin(ctx, conn); err != nil {
		return err
	}
	done := false
	defer func() {
		if done {
			return
		}
		// Roll back even when ctx is canceled; if that fails too, the
		// connection may still be inside a transaction: discard it.
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			q.discardConn(conn)
		}
	}()
	if err := fn(conn); err != nil {
		return Interpret(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return Interpret(err)
	}
	done = true
	q.Commits.Add(1)
	if !relaxed {
		q.SyncedCommits.Add(1)
	}
	return nil
}

// writeConn returns the connection a write transaction runs on: the held
// writer under cfg.HoldWriter, else one of the pool's. The caller holds
// wmu and hands it back with releaseConn.
func (q *Queue) writeConn(ctx context.Context) (*sql.Conn, error) {
	if !q.cfg.HoldWriter {
		return q.db.Conn(ctx)
	}
	if q.writer == nil {
		conn, err := q.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		q.writer = conn
	}
	return q.writer, nil
}

// releaseConn hands back the connection of a write transaction that ended
// with err: a held writer stays held unless the transaction failed (a
// failure may leave the connection in any state: it is discarded, and the
// next write takes a fresh one).
func (q *Queue) releaseConn(conn *sql.Conn, err error) {
	switch {
	case conn != q.writer:
		_ = conn.Close() // the pool's, or already discarded
	case err != nil:
		q.discardConn(conn)
	}
}

// discardConn closes conn without returning it to the pool, and forgets
// it if it is the held writer.
func (q *Queue) discardConn(conn *sql.Conn) {
	if conn == q.writer {
		if q.insertOne != nil {
			_ = q.insertOne.Close()
		}
		q.writer, q.insertOne = nil, nil
	}
	_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // closes conn
	_ = conn.Close()
}

// preparedInsert returns the insert of n intents prepared on the held
// writer when n is 1 and ex is that writer, nil otherwise (the caller then
// sends the statement's text).
func (q *Queue) preparedInsert(ctx context.Context, ex execer, n int) *sql.Stmt {
	if n != 1 || q.writer == nil || ex != execer(q.writer) {
		return nil
	}
	if q.insertOne == nil {
		st, err := q.writer.PrepareContext(ctx, sqlInsertIntent)
		if err != nil {
			return nil
		}
		q.insertOne = st
	}
	return q.insertOne
}

// Close lets go of the held writer, if any: call it before closing the
// database. Writes after Close take a connection again.
func (q *Queue) Close() {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if q.insertOne != nil {
		_ = q.insertOne.Close()
	}
	if q.writer != nil {
		_ = q.writer.Close()
	}
	q.writer, q.insertOne = nil, nil
}

// begin runs BEGIN IMMEDIATE, retrying for up to q.cfg.BusyRetry while the
// write lock is held elsewhere.
func (q *Queue) begin(ctx context.Context, conn *sql.Conn) error {
	return q.retryBusy(ctx, func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return Interpret(err)
	})
}

// retryBusy runs fn, again after a short jittered pause while it fails
// because the queue is locked, for up to q.cfg.BusyRetry.
func (q *Queue) retryBusy(ctx context.Context, fn func() error) error {
	var deadline time.Time
	for {
		err := fn()
		if err == nil || !Is(err, Locked) || q.cfg.BusyRetry <= 0 {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(q.cfg.BusyRetry)
		} else if time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(time.Millisecond + rand.N(4*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

const (
	sqlInsertIntentHead = `INSERT INTO idemkit_intents
	(id, key, state, method, url, host, header, body, fingerprint, attempts, next_attempt_at, created_at, updated_at, instance, credential_headers)
	VALUES `
	sqlInsertIntentRow  = `(?, ?, 'pending', ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)`
	sqlInsertIntentTail = `
	ON CONFLICT (key) DO NOTHING
	RETURNING id`
	sqlInsertIntent = sqlInsertIntentHead + sqlInsertIntentRow + sqlInsertIntentTail

	sqlSelectByKey = `SELECT ` + rowColumns + ` FROM idemkit_intents WHERE key = ?`
	sqlSelectByID  = `SELECT ` + rowColumns + ` FROM idemkit_intents WHERE id = ?`

	// sqlSelectDue is the indexed due lookup (idemkit_intents_due), of
	// this instance's intents only (?2 the recorded origin, ?3 self).
	// A leased intent is skipped until its lease ends (a few rows: one
	// per intent in flight).
	sqlSelectDue = `SELECT ` + rowColumns + ` FROM idemkit_intents
	WHERE state = 'pending' AND next_attempt_at <= ?1 AND COALESCE(leased_until, '') <= ?1
	AND COALESCE(instance, ?2) = ?3
	AND id NOT IN (SELECT value FROM json_each(?4))
	ORDER BY next_attempt_at LIMIT 1`

	sqlSelectDueID = `SELECT ` + rowColumns + ` FROM idemkit_intents
	WHERE id = ?1 AND state = 'pending' AND next_attempt_at <= ?2 AND COALESCE(leased_until, '') <= ?2`

	// sqlNextDue is the earliest time a pending intent can be claimed:
	// its due time, or its lease's end if that is later.
	sqlNextDue = `SELECT MIN(MAX(next_attempt_at, COALESCE(leased_until, ''))) FROM idemkit_intents
	WHERE state = 'pending' AND COALESCE(instance, ?1) = ?2
	AND id NOT IN (SELECT value FROM json_each(?3))`

	sqlHostWindow = `SELECT window_seconds FROM idemkit_hosts WHERE host = ?`

	sqlUpsertHost = `INSERT INTO idemkit_hosts (host, window_seconds, updated_at) VALUES (?, ?, ?)
	ON CONFLICT (host) DO UPDATE SET window_seconds = excluded.window_seconds, updated_at = excluded.updated_at`

	// sqlClaim takes the lease (a new fencing token, this process as its
	// owner) and starts an attempt. The horizon only ever moves earlier.
	sqlClaim = `UPDATE idemkit_intents SET
		lease_token = lease_token + 1,
		lease_owner = ?5,
		key_form = COALESCE(key_form, ?6),
		attempts = attempts + 1,
		first_attempt_at = COALESCE(first_attempt_at, ?1),
		horizon = CASE WHEN horizon IS NULL OR horizon > ?2 THEN ?2 ELSE horizon END,
		leased_until = ?3,
		updated_at = ?1
	WHERE id = ?4 AND state = 'pending'
	RETURNING lease_token, attempts, first_attempt_at, horizon, key_form`

	// sqlStartAttempt is sqlClaim for a retry within the same lease.
	sqlStartAttempt = `UPDATE idemkit_intents SET
		attempts = attempts + 1,
		lease_owner = ?6,
		horizon = CASE WHEN horizon IS NULL OR horizon > ?2 THEN ?2 ELSE horizon END,
		leased_until = ?3,
		updated_at = ?1
	WHERE id = ?4 AND lease_token = ?5 AND state = 'pending'
	RETURNING attempts, horizon`

	sqlInsertAttempt = `INSERT INTO idemkit_attempts (intent_id, n, token, started_at) VALUES (?, ?, ?, ?)`

	sqlFinishAttempt = `UPDATE idemkit_attempts SET finished_at = ?, status = ?, error = ?, replayed = ?, not_sent = ?
	WHERE intent_id = ? AND n = ?`

	// sqlReschedule keeps the intent pending, due at ?1; leased until ?2
	// by ?3 (an in-process sleep) or, both NULL, by nobody.
	sqlReschedule = `UPDATE idemkit_intents SET
		next_attempt_at = ?1, leased_until = ?2, lease_owner = ?3, last_error = ?4, updated_at = ?5
	WHERE id = ?6 AND lease_token = ?7 AND state = 'pending'`

	// sqlShortenHorizon moves a stored horizon earlier (a window learned).
	sqlShortenHorizon = `UPDATE idemkit_intents SET horizon = ?1 WHERE id = ?2 AND horizon > ?1`

	sqlFinish = `UPDATE idemkit_intents SET
		state = ?1, outcome_status = ?2, outcome_header = ?3, outcome_body = ?4, outcome_replayed = ?5,
		outcome_key_reused = ?10, last_error = ?6, updated_at = ?7, next_attempt_at = ?7, lease_owner = NULL,
		leased_until = NULL
	WHERE id = ?8 AND lease_token = ?9 AND state = 'pending'`

	sqlCancel = `UPDATE idemkit_intents SET state = 'canceled', last_error = 'canceled', updated_at = ?1, next_attempt_at = ?1,
		lease_owner = NULL, leased_until = NULL
	WHERE id = ?2 AND state = 'pending'`

	sqlQuarantine = `UPDATE idemkit_intents SET next_attempt_at = ? WHERE id = ?`

	// sqlOverBudget holds an intent whose attempt budget is spent until
	// ?1, saying why in its last error.
	sqlOverBudget = `UPDATE idemkit_intents SET next_attempt_at = ?1, updated_at = ?2, last_error = ?3
	WHERE id = ?4 AND state = 'pending'`

	sqlNthLastAttempt = `SELECT started_at FROM idemkit_attempts WHERE intent_id = ? ORDER BY n DESC LIMIT 1 OFFSET ?`
	// sqlLastAttempts returns two attempt start times, most recent first,
	// from an offset.
	sqlLastAttempts = `SELECT started_at FROM idemkit_attempts WHERE intent_id = ? ORDER BY n DESC LIMIT 2 OFFSET ?`

	sqlSelectAttempts = `SELECT n, token, started_at, finished_at, status, error, replayed, not_sent
	FROM idemkit_attempts WHERE intent_id = ? ORDER BY n`

	sqlPruneBatch = `SELECT id FROM idemkit_intents WHERE state <> 'pending' AND updated_at < ? LIMIT 1000`

	sqlCounts = `SELECT state, COUNT(*) FROM idemkit_intents GROUP BY state`
)
