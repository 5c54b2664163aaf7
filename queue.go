package idemkit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/internal/wire"
)

//go:embed schema/*.up.sql
var schemaFS embed.FS

// queue is the SQLite side of a Client. Every write goes through wmu, so this
// process never contends with itself for SQLite's single write lock (which
// would cost busy-handler sleeps); other processes are handled by the busy
// timeout and BEGIN IMMEDIATE.
type queue struct {
	db  *sql.DB
	wmu sync.Mutex
	// busyRetry, when positive, is how long BEGIN IMMEDIATE is retried in Go
	// while another process holds the write lock. Open sets it and keeps
	// SQLite's own busy handler short: that handler backs off to 100 ms
	// sleeps, so a process polling through it loses the lock, over and over,
	// to a busy neighbour; short jittered retries here keep two processes
	// sharing a queue fair.
	busyRetry time.Duration
	// skip returns the JSON array of the ids claims pass over (the
	// Client's intents past Config.MaxAttempts); nil: none.
	skip func() string
	// owner is this process's lease owner (see leaseOwner), written with
	// every lease it takes or renews.
	owner string
	// perHour is Config.MaxAttemptsPerHour, checked by every claim.
	perHour int
	// genPath is the -generation file next to the queue (generation.go).
	genPath string
	// keyForm returns how a claimed intent's key travels if none is
	// recorded yet ("bare" or "quoted"); nil: bare.
	keyForm func(in *Intent) string
	// self is this client's instance, "host|path", written with every
	// intent it queues; origin is the instance the queue recorded first
	// (see instance.go).
	self, origin string

	// batches counts group commits; waiting counts Submit calls waiting for
	// one (both for tests and the curious).
	batches atomic.Int64
	waiting atomic.Int64
	commits atomic.Int64 // write transactions committed
	// syncedCommits counts the commits made with the connection's own
	// synchronous level (FULL: one fsync each); the others are relaxed.
	syncedCommits atomic.Int64
	// wal is set when the queue is in WAL mode, where a commit with
	// synchronous=NORMAL can be lost to a power cut but never corrupts.
	wal bool
}

// execer is what *sql.Conn and *sql.Tx have in common.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// inTx runs fn in a BEGIN IMMEDIATE transaction on a connection of its own:
// the write lock is taken at BEGIN, so a read in fn can never be invalidated
// by another writer (no SQLITE_BUSY_SNAPSHOT). It commits if fn returns nil
// and rolls back on an error or a panic.
func (q *queue) inTx(ctx context.Context, fn func(ex execer) error) (err error) {
	return q.tx(ctx, false, fn)
}

// tx is inTx; with relaxed, on a queue in WAL mode, the commit is made with
// synchronous=NORMAL (no fsync: durable against a crash of the process,
// not against a power cut; see finish) and the connection's level is put
// back afterwards.
func (q *queue) tx(ctx context.Context, relaxed bool, fn func(ex execer) error) (err error) {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return interpretError(err)
	}
	defer conn.Close()
	relaxed = relaxed && q.wal
	if relaxed {
		var level int
		if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level); err != nil {
			return interpretError(err)
		}
		if level <= 1 {
			relaxed = false // NORMAL or OFF already: the caller's choice
		} else {
			if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL"); err != nil {
				return interpretError(err)
			}
			defer func() {
				if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA synchronous = "+strconv.Itoa(level)); rerr != nil {
					_ = conn.Raw(func(any) error { return driver.ErrBadConn })
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
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	if err := fn(conn); err != nil {
		return interpretError(err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return interpretError(err)
	}
	done = true
	q.commits.Add(1)
	if !relaxed {
		q.syncedCommits.Add(1)
	}
	return nil
}

// begin runs BEGIN IMMEDIATE, retrying for up to q.busyRetry while the
// write lock is held elsewhere.
func (q *queue) begin(ctx context.Context, conn *sql.Conn) error {
	return q.retryBusy(ctx, func() error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return interpretError(err)
	})
}

// retryBusy runs fn, again after a short jittered pause while it fails
// because the queue is locked, for up to q.busyRetry.
func (q *queue) retryBusy(ctx context.Context, fn func() error) error {
	var deadline time.Time
	for {
		err := fn()
		if err == nil || !isQueue(err, queueLocked) || q.busyRetry <= 0 {
			return err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(q.busyRetry)
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

// queueSchemaVersion is the version of the queue schema this package
// writes: the number of its last migration (idemkit_client_migrations;
// Client.SchemaVersion reads it). Open refuses a queue migrated by a newer
// version, whose schema this one cannot write safely.
const queueSchemaVersion = 7

// migrationsVersionTable is where a queue records its applied migrations.
const migrationsVersionTable = "idemkit_client_migrations"

// migrate applies, in one transaction, the embedded schema files
// (schema/NNN_*.up.sql) above the highest applied version, with the
// module's migration runner. The step is retried while another process
// holds the write lock (several processes opening a fresh file at once),
// for up to busyRetry.
func (q *queue) migrate(ctx context.Context, now time.Time) error {
	ms, err := migrate.Load(schemaFS, "schema")
	if err != nil {
		return err
	}
	target := migrate.SQLTarget(q.db, migrationsVersionTable, func() time.Time { return now })
	q.wmu.Lock()
	defer q.wmu.Unlock()
	return q.retryBusy(ctx, func() error {
		_, err := migrate.Run(ctx, target, ms)
		if errors.Is(err, migrate.ErrNewerSchema) {
			return &QueueError{problem: queueNewer, Err: err}
		}
		return interpretError(err)
	})
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

	sqlSelectAttempts = `SELECT n, token, started_at, finished_at, status, error, replayed, not_sent
	FROM idemkit_attempts WHERE intent_id = ? ORDER BY n`

	sqlPruneBatch = `SELECT id FROM idemkit_intents WHERE state <> 'pending' AND updated_at < ? LIMIT 1000`

	sqlCounts = `SELECT state, COUNT(*) FROM idemkit_intents GROUP BY state`
)

// insertIntentArgs is the number of arguments of one intent's row.
const insertIntentArgs = 13

func insertArgs(p *prepared, id, ts, instance string) []any {
	return []any{id, p.key, p.method, p.url, p.host, wire.EncodeHeader(p.header), p.body, p.fp, ts, ts, ts, instance, p.credNamesJSON()}
}

// insertOne inserts one intent, or returns the intent already queued under
// the same key when its fingerprint matches (ErrKeyReused otherwise).
func insertOne(ctx context.Context, ex execer, p *prepared, id string, now time.Time, instance string) (*Intent, error) {
	ts := wire.FormatTime(now)
	var got string
	err := ex.QueryRowContext(ctx, sqlInsertIntent, insertArgs(p, id, ts, instance)...).Scan(&got)
	switch {
	case err == nil:
		return insertedIntent(p, id, ts, instance), nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, err
	}
	return queuedIntent(ctx, ex, p)
}

// insertedIntent is the intent just inserted from p, stamped ts.
func insertedIntent(p *prepared, id, ts, instance string) *Intent {
	at, _ := wire.ParseTime(ts)
	return &Intent{ID: id, Key: p.key, State: StatePending, Method: p.method, URL: p.url,
		Header: p.header, Body: p.body, Fingerprint: p.fp, NextAttemptAt: at, CreatedAt: at, UpdatedAt: at,
		CredentialHeaders: p.credNames(), instance: instance}
}

// queuedIntent returns the intent already queued under p's key when its
// fingerprint matches p's (ErrKeyReused otherwise).
func queuedIntent(ctx context.Context, ex execer, p *prepared) (*Intent, error) {
	r, err := scanRow(ex.QueryRowContext(ctx, sqlSelectByKey, p.key))
	if err != nil {
		return nil, err
	}
	in, err := decodeIntent(r)
	if err != nil {
		return nil, err
	}
	if string(in.Fingerprint) != string(p.fp) {
		return nil, fmt.Errorf("%w: key %q is already queued (intent %s) with a different request", ErrKeyReused, p.key, in.ID)
	}
	return in, nil
}

// claimed is an intent this process now holds the lease of, with an attempt
// started (unless expired is set: the horizon had passed and the intent was
// marked expired instead).
type claimed struct {
	lease
	in      *Intent
	attempt int
	expired bool
	// hz is the intent's effective window and horizon, as planned at the
	// claim.
	hz horizon
}

// lease names one claim of an intent: the intent and the fencing token
// the claim took. Every write under the claim checks the token.
type lease struct {
	id    string
	token int64
}

// planFunc computes the effective window and the horizon for an intent
// about to be attempted, given the window last learned for its host (0 if
// none).
type planFunc func(in *Intent, hostWindow time.Duration) horizon

// claim takes the lease of the due intent with the given id, or of the
// earliest due intent when id is empty, and starts its attempt, in one
// transaction. It returns nil, nil when nothing is due.
func (q *queue) claim(ctx context.Context, id string, now time.Time, leaseFor time.Duration, plan planFunc) (*claimed, error) {
	return q.claimTx(ctx, id, nil, now, leaseFor, plan)
}

// insertClaim inserts an intent and claims it in the same transaction (one
// fsync, not two: Do). If the key was already queued with the same request,
// it claims that intent if it is due; it returns the intent either way.
func (q *queue) insertClaim(ctx context.Context, p *prepared, id string, now time.Time, leaseFor time.Duration, plan planFunc) (*Intent, *claimed, error) {
	var in *Intent
	cl, err := q.claimTx(ctx, "", func(ex execer) (string, error) {
		var err error
		in, err = insertOne(ctx, ex, p, id, now, q.self)
		if err != nil {
			return "", err
		}
		return in.ID, nil
	}, now, leaseFor, plan)
	if isQueue(err, queueForeign) {
		return in, nil, err // committed: the intent is queued, elsewhere's
	}
	if err != nil {
		return nil, nil, err
	}
	return in, cl, nil
}

// claimTx is claim; insert, if not nil, runs first in the same transaction
// and returns the id to claim.
func (q *queue) claimTx(ctx context.Context, id string, insert func(ex execer) (string, error), now time.Time, leaseFor time.Duration, plan planFunc) (*claimed, error) {
	var out *claimed
	var decodeErr error
	var gen int64 // the generation a first attempt took
	err := q.inTx(ctx, func(ex execer) error {
		gen = 0
		if insert != nil {
			var err error
			if id, err = insert(ex); err != nil {
				return err
			}
		}
		var r *row
		for tries := 0; ; tries++ {
			var sr *sql.Row
			if id == "" {
				sr = ex.QueryRowContext(ctx, sqlSelectDue, wire.FormatTime(now), q.origin, q.self, q.skipped())
			} else {
				sr = ex.QueryRowContext(ctx, sqlSelectDueID, id, wire.FormatTime(now))
			}
			var err error
			r, err = scanRow(sr)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			// The attempt budget, checked when the attempt would start: a
			// process that dies mid-attempt, over and over, never gets to
			// check it after an answer.
			held, err := q.overBudget(ctx, ex, r, now)
			if err != nil {
				return err
			}
			if !held {
				break
			}
			if id != "" || tries >= 16 {
				return nil // held: not due now
			}
		}
		in, err := decodeIntent(r)
		if err == nil {
			if ferr := q.foreign(in); ferr != nil {
				decodeErr = ferr // not claimed: queued at another instance
				return nil
			}
		}
		if err != nil {
			// Quarantine the row for an hour so the worker moves on.
			decodeErr = err
			_, qerr := ex.ExecContext(ctx, sqlQuarantine, wire.FormatTime(now.Add(time.Hour)), r.id)
			return qerr
		}
		var winSec int64
		if err := ex.QueryRowContext(ctx, sqlHostWindow, r.host).Scan(&winSec); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		hz := plan(in, time.Duration(winSec)*time.Second)
		horizon := hz.at
		ts := wire.FormatTime(now)
		if now.After(horizon) {
			// Never attempted past the horizon: expire under the current
			// token (we hold the write lock, and the row is due).
			msg := "horizon " + wire.FormatTime(horizon) + " passed without a definitive answer"
			if in.LastError != "" {
				msg += "; last error: " + in.LastError
			}
			if _, err := ex.ExecContext(ctx, sqlFinish, string(StateExpired), nil, nil, nil, nil, msg, ts, in.ID, r.leaseToken, 0); err != nil {
				return err
			}
			in.State, in.LastError, in.UpdatedAt = StateExpired, msg, now.Truncate(time.Millisecond)
			out = &claimed{lease: lease{in.ID, r.leaseToken}, in: in, expired: true, hz: hz}
			return nil
		}
		var first, stored string
		c := &claimed{lease: lease{id: in.ID}, in: in, hz: hz}
		form := "bare"
		if q.keyForm != nil {
			form = q.keyForm(in)
		}
		if err := ex.QueryRowContext(ctx, sqlClaim, ts, wire.FormatTime(horizon), wire.FormatTime(now.Add(leaseFor)), in.ID, q.owner, form).
			Scan(&c.token, &c.attempt, &first, &stored, &in.keyForm); err != nil {
			return err
		}
		if _, err := ex.ExecContext(ctx, sqlInsertAttempt, in.ID, c.attempt, c.token, ts); err != nil {
			return err
		}
		if in.FirstAttemptAt.IsZero() {
			if gen, err = bumpGeneration(ctx, ex); err != nil {
				return err
			}
		}
		in.Attempts = c.attempt
		in.FirstAttemptAt, _ = wire.ParseTime(first)
		in.Horizon, _ = wire.ParseTime(stored)
		c.hz.at = in.Horizon
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	if gen > 0 {
		q.noteGeneration(gen) // before the first byte is sent
	}
	if decodeErr != nil {
		return nil, decodeErr
	}
	return out, nil
}

// overBudget holds the intent of row r, due at now, when Config.MaxAttemptsPerHour
// attempts of it started within the last hour: it is made due when the
// oldest of them is an hour old, and its last error says why it waits.
func (q *queue) overBudget(ctx context.Context, ex execer, r *row, now time.Time) (bool, error) {
	if q.perHour <= 0 {
		return false, nil
	}
	var s string
	err := ex.QueryRowContext(ctx, sqlNthLastAttempt, r.id, q.perHour-1).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	oldest, err := wire.ParseTime(s)
	if err != nil || !oldest.Add(time.Hour).After(now) {
		return false, nil // a damaged time is left to decodeIntent's checks
	}
	due := oldest.Add(time.Hour)
	msg := fmt.Sprintf("waiting until %s: %d attempts started in the last hour (Config.MaxAttemptsPerHour)", wire.FormatTime(due), q.perHour)
	before := r.lastError
	if strings.HasPrefix(before, "waiting until ") {
		_, before, _ = strings.Cut(before, "; before: ")
	}
	if before != "" {
		msg += "; before: " + before
	}
	_, err = ex.ExecContext(ctx, sqlOverBudget, wire.FormatTime(due), wire.FormatTime(now), msg, r.id)
	return err == nil, err
}

// startAttempt starts a retry within a lease already held: it fails with
// errLeaseLost if the token is no longer current.
func (q *queue) startAttempt(ctx context.Context, l lease, now, horizon, leasedUntil time.Time) (int, time.Time, error) {
	var n int
	var hz string
	err := q.inTx(ctx, func(ex execer) error {
		ts := wire.FormatTime(now)
		err := ex.QueryRowContext(ctx, sqlStartAttempt, ts, wire.FormatTime(horizon), wire.FormatTime(leasedUntil), l.id, l.token, q.owner).Scan(&n, &hz)
		if errors.Is(err, sql.ErrNoRows) {
			return errLeaseLost
		}
		if err != nil {
			return err
		}
		_, err = ex.ExecContext(ctx, sqlInsertAttempt, l.id, n, l.token, ts)
		return err
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	h, _ := wire.ParseTime(hz)
	return n, h, nil
}

// nthLastAttempt returns the start time of the intent's n-th most recent
// attempt, or the zero time if it has fewer than n.
func (q *queue) nthLastAttempt(ctx context.Context, id string, n int) (time.Time, error) {
	var s string
	err := q.db.QueryRowContext(ctx, sqlNthLastAttempt, id, n-1).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, interpretError(err)
	}
	t, err := wire.ParseTime(s)
	if err != nil {
		return time.Time{}, queueErrorf(queueCorrupt, "attempt of %s: %w", id, err)
	}
	return t, nil
}

// attemptResult is what an attempt produced, as logged.
type attemptResult struct {
	n        int
	status   int
	errText  string
	replayed bool
	// notSent: the attempt is known never to have left this process.
	notSent bool
	// learned is the Idempotency-Window the response advertised, if any,
	// and horizon the intent's horizon after it (zero: unchanged).
	learned time.Duration
	horizon time.Time
	host    string
}

func (q *queue) logAttempt(ctx context.Context, ex execer, id string, now time.Time, a *attemptResult) error {
	var status any
	if a.status != 0 {
		status = a.status
	}
	if _, err := ex.ExecContext(ctx, sqlFinishAttempt, wire.FormatTime(now), status, a.errText, boolInt(a.replayed), boolInt(a.notSent), id, a.n); err != nil {
		return err
	}
	if a.learned > 0 {
		if _, err := ex.ExecContext(ctx, sqlUpsertHost, a.host, int64(a.learned/time.Second), wire.FormatTime(now)); err != nil {
			return err
		}
	}
	if !a.horizon.IsZero() {
		if _, err := ex.ExecContext(ctx, sqlShortenHorizon, wire.FormatTime(a.horizon), id); err != nil {
			return err
		}
	}
	return nil
}

// wait is what a claim writes when its intent must wait for its next
// attempt: when it is due, and whether this process keeps the lease over
// the wait.
type wait struct {
	due time.Time
	// leasedUntil, if not zero, keeps the lease until then (an in-process
	// sleep); zero releases it.
	leasedUntil time.Time
	// attempt is the attempt to log, if any; lastErr the intent's last
	// error.
	attempt *attemptResult
	lastErr string
}

// reschedule logs w's attempt and keeps the intent pending until w.due.
// It fails with errLeaseLost if l's token is no longer current.
func (q *queue) reschedule(ctx context.Context, l lease, now time.Time, w wait) error {
	return q.inTx(ctx, func(ex execer) error {
		if w.attempt != nil {
			if err := q.logAttempt(ctx, ex, l.id, now, w.attempt); err != nil {
				return err
			}
		}
		var until, owner any
		if !w.leasedUntil.IsZero() {
			until, owner = wire.FormatTime(w.leasedUntil), q.owner
		}
		res, err := ex.ExecContext(ctx, sqlReschedule, wire.FormatTime(w.due), until, owner, w.lastErr, wire.FormatTime(now), l.id, l.token)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errLeaseLost
		}
		return nil
	})
}

// finish logs the attempt (if any) and moves the intent to a terminal state.
//
// An outcome the server answered (o not nil) is committed without an fsync
// (synchronous=NORMAL, WAL mode only): a process crash cannot lose it (the
// WAL pages are the operating system's once written), a power cut can, and
// then the intent is pending again and its next attempt, same key, gets the
// server's stored answer. The intent itself and its attempt were fsynced
// before the first byte was sent. Every other terminal state (no answer:
// expired, failed before sending) keeps the fsync.
func (q *queue) finish(ctx context.Context, l lease, now time.Time, state IntentState, o *Outcome, lastErr string, a *attemptResult) error {
	return q.tx(ctx, o != nil, func(ex execer) error {
		if a != nil {
			if err := q.logAttempt(ctx, ex, l.id, now, a); err != nil {
				return err
			}
		}
		var st, hdr, body, rep any
		reused := 0
		if o != nil {
			st, hdr, body, rep, reused = o.Status, wire.EncodeHeader(o.Header), o.Body, boolInt(o.Replayed), boolInt(o.keyReused)
			if o.Body == nil {
				body = []byte{}
			}
		}
		res, err := ex.ExecContext(ctx, sqlFinish, string(state), st, hdr, body, rep, lastErr, wire.FormatTime(now), l.id, l.token, reused)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errLeaseLost
		}
		return nil
	})
}

func (q *queue) cancel(ctx context.Context, id string, now time.Time) (bool, error) {
	var ok bool
	err := q.inTx(ctx, func(ex execer) error {
		res, err := ex.ExecContext(ctx, sqlCancel, wire.FormatTime(now), id)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	return ok, err
}

func (q *queue) get(ctx context.Context, id string) (*Intent, error) {
	r, err := scanRow(q.db.QueryRowContext(ctx, sqlSelectByID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, interpretError(err)
	}
	return decodeIntent(r)
}

func (q *queue) list(ctx context.Context, o *ListOptions) ([]*Intent, error) {
	var where []string
	var args []any
	order := "created_at, id"
	if o.State != "" {
		if !o.State.valid() {
			return nil, invalidf("ListOptions.State: unknown state %q", o.State)
		}
		where = append(where, "state = ?")
		args = append(args, string(o.State))
		if o.State == StatePending {
			order = "next_attempt_at, id"
		} else {
			// Lets the planner use the partial index idemkit_intents_terminal.
			where = append(where, "state <> 'pending'")
			order = "updated_at, id"
		}
	}
	if !o.UpdatedSince.IsZero() {
		where = append(where, "updated_at >= ?")
		args = append(args, wire.FormatTime(o.UpdatedSince))
	}
	query := `SELECT ` + rowColumns + ` FROM idemkit_intents`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY " + order + " LIMIT ?"
	args = append(args, o.Limit)
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*Intent
	var damaged []error
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, interpretError(err)
		}
		in, err := decodeIntent(r)
		if err != nil {
			// One damaged row must not hide the others: list them and
			// report it (claim quarantines such a row; Get reports it).
			damaged = append(damaged, err)
			continue
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return out, errors.Join(damaged...)
}

func (q *queue) attempts(ctx context.Context, id string) ([]*Attempt, error) {
	rows, err := q.db.QueryContext(ctx, sqlSelectAttempts, id)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []*Attempt
	for rows.Next() {
		a := &Attempt{}
		var started string
		var finished *string
		var status *int64
		var replayed, notSent int64
		if err := rows.Scan(&a.N, &a.Token, &started, &finished, &status, &a.Error, &replayed, &notSent); err != nil {
			return nil, interpretError(err)
		}
		var err error
		if a.StartedAt, err = wire.ParseTime(started); err != nil {
			return nil, queueErrorf(queueCorrupt, "attempt %d of %s: %w", a.N, id, err)
		}
		if finished != nil {
			if a.FinishedAt, err = wire.ParseTime(*finished); err != nil {
				return nil, queueErrorf(queueCorrupt, "attempt %d of %s: %w", a.N, id, err)
			}
		}
		if status != nil {
			a.Status = int(*status)
		}
		a.Replayed = replayed != 0
		a.NotSent = notSent != 0
		out = append(out, a)
	}
	return out, interpretError(rows.Err())
}

func (q *queue) counts(ctx context.Context) (map[IntentState]int, error) {
	rows, err := q.db.QueryContext(ctx, sqlCounts)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	out := map[IntentState]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, interpretError(err)
		}
		out[IntentState(s)] = n
	}
	return out, interpretError(rows.Err())
}

// skipped is the JSON array of intent ids claims pass over.
func (q *queue) skipped() string {
	if q.skip == nil {
		return "[]"
	}
	return q.skip()
}

// makeDue makes the given pending intents that nobody holds due at now,
// if they were due later, and returns how many it changed.
func (q *queue) makeDue(ctx context.Context, ids []string, now time.Time) (int, error) {
	var n int64
	err := q.inTx(ctx, func(ex execer) error {
		args := []any{wire.FormatTime(now)}
		for _, id := range ids {
			args = append(args, id)
		}
		res, err := ex.ExecContext(ctx, `UPDATE idemkit_intents SET next_attempt_at = ?1
		WHERE state = 'pending' AND lease_owner IS NULL AND leased_until IS NULL AND next_attempt_at > ?1
		AND id IN (?`+strings.Repeat(",?", len(ids)-1)+`)`, args...)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}

// makeDueBy makes a pending intent that nobody holds due at t, if it was
// due later.
func (q *queue) makeDueBy(ctx context.Context, id string, t time.Time) error {
	_, err := q.makeDue(ctx, []string{id}, t)
	return err
}

// nextDue returns the earliest time a pending intent can be claimed (its
// due time, or its lease's end if later), or the zero time when none is
// pending (intents claims skip are left out).
func (q *queue) nextDue(ctx context.Context) (time.Time, error) {
	var s *string
	if err := q.db.QueryRowContext(ctx, sqlNextDue, q.origin, q.self, q.skipped()).Scan(&s); err != nil {
		return time.Time{}, interpretError(err)
	}
	if s == nil {
		return time.Time{}, nil
	}
	t, err := wire.ParseTime(*s)
	if err != nil {
		return time.Time{}, queueErrorf(queueCorrupt, "next_attempt_at: %w", err)
	}
	return t, nil
}

// prune deletes terminal intents (in states, if any) last updated before
// cutoff, and their attempt logs, a thousand per transaction.
func (q *queue) prune(ctx context.Context, cutoff time.Time, states []IntentState) (int, error) {
	query, args := sqlPruneBatch, []any{wire.FormatTime(cutoff)}
	if len(states) > 0 {
		query = strings.Replace(query, " LIMIT", " AND state IN (?"+strings.Repeat(",?", len(states)-1)+") LIMIT", 1)
		for _, s := range states {
			args = append(args, string(s))
		}
	}
	total := 0
	for {
		var n int
		err := q.inTx(ctx, func(ex execer) error {
			rows, err := ex.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			var ids []any
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			in := "(?" + strings.Repeat(",?", len(ids)-1) + ")"
			if _, err := ex.ExecContext(ctx, `DELETE FROM idemkit_attempts WHERE intent_id IN `+in, ids...); err != nil {
				return err
			}
			if _, err := ex.ExecContext(ctx, `DELETE FROM idemkit_intents WHERE id IN `+in, ids...); err != nil {
				return err
			}
			n = len(ids)
			return nil
		})
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
