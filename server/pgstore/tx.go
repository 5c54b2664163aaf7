package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// Tx returns the transaction of a transactional-mode request on a Store.
// The handler writes its effect on it; the middleware stores the response
// in it and commits. The handler must not commit or roll it back. Once the
// transaction ended every method fails with pgx.ErrTxClosed.
func Tx(ctx context.Context) (pgx.Tx, bool) {
	h, _ := server.TxHandle(ctx)
	tx, ok := h.(pgx.Tx)
	return tx, ok
}

// BeginTx implements server.Store.BeginTx: it takes a connection from the pool for
// a transaction whose lock_timeout is lockTimeout (3s
// when lockTimeout is 0), so a claim that waits longer on a concurrent
// uncommitted claim of the same scope fails with server.ErrInFlight. ctx bounds only
// the wait for a connection; the caller must end the transaction with Commit
// or Rollback.
//
// Round trips: the first claim travels with the BEGIN in one batch (it
// sets the timeouts itself) and claims a fresh scope or reads a completed
// record (or the handler's first statement travels with the BEGIN, without
// the claim), and the completion travels with the COMMIT: a new key costs
// two round trips besides the handler's and a replay two (the claim and the
// ROLLBACK), as a hand-written pgx.Batch version does.
//
// Handle returns a pgx.Tx.
func (s *Store) BeginTx(ctx context.Context, lockTimeout time.Duration) (server.StoreTx, error) {
	if lockTimeout < 0 {
		return nil, fmt.Errorf("idemkit/server: BeginTx: negative lock timeout %v", lockTimeout)
	}
	if lockTimeout == 0 {
		lockTimeout = lockTimeoutDefault
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, interpretError(err)
	}
	t := &pgTx{conn: conn, st: s, timeouts: s.timeoutArgs(lockTimeout)}
	t.qv.q, t.connQ.q, t.hv.t = (*beginQuerier)(t), conn, t
	t.q, t.handle = &t.qv, &t.hv
	return t, nil
}

// timeouts are the arguments of pgSetTimeouts for one lock timeout.
type timeouts struct {
	lock time.Duration
	args []any
}

// timeoutArgs returns the arguments of pgSetTimeouts, formatted once for the
// lock timeout last asked for (a middleware always asks for the same one).
func (s *Store) timeoutArgs(lockTimeout time.Duration) []any {
	if t := s.timeouts.Load(); t != nil && t.lock == lockTimeout {
		return t.args
	}
	t := &timeouts{lock: lockTimeout, args: []any{
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

// pgTx is the StoreTx of Store. Its connection is its own from
// BeginTx until Commit or Rollback. The BEGIN is not sent until the first
// statement: it travels with the claim (or the handler's first statement)
// in one round trip.
type pgTx struct {
	conn   *pgxpool.Conn // nil once the transaction ended
	tx     pgx.Tx        // nil until the BEGIN was sent
	handle *pgHandleTx
	st     *Store
	q      *querier // &qv
	// qv, connQ and hv are allocated with the pgTx: the querier of the
	// transaction ((*beginQuerier)(t)), the querier of its connection
	// outside it, and the handle.
	qv, connQ querier
	hv        pgHandleTx
	timeouts  []any // the arguments of pgSetTimeouts
	// expiresAt is the end of the window of the claim this transaction
	// acquired, as the caller's clock reckons it (zero before).
	expiresAt time.Time
	// completeSQL and complete are the completion, which Commit sends with
	// the COMMIT in one round trip.
	completeSQL string
	complete    []any
	// notify is the payload of the completion's notification
	// (Config.NotifyChanges), queued before it: delivered on COMMIT.
	notify string
}

// beginBatch returns a batch that begins the transaction and sets its
// timeouts; the caller queues more and sends it with sendBatch.
func (t *pgTx) beginBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(pgSetTimeouts, t.timeouts...)
	return b
}

// sendBatch sends a batch that begins the transaction and reads the results
// of its first n statements (the BEGIN and, from beginBatch, the timeouts).
func (t *pgTx) sendBatch(ctx context.Context, b *pgx.Batch, n int) (pgx.BatchResults, error) {
	br := t.conn.Conn().SendBatch(ctx, b)
	t.tx = br.Tx()
	for range n {
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
	br, err := t.sendBatch(ctx, t.beginBatch(), 2)
	if err != nil {
		return err
	}
	return br.Close()
}

// Claim implements server.StoreTx.Claim. The first claim of the
// transaction travels with the BEGIN in one round trip (setting the
// timeouts), which acquires a fresh scope or reads a live completed record
// (claimFresh); any other row that claim meets, and any later claim, is
// decided by the upsert, which locks the row until the transaction ends,
// and read by a second statement.
func (t *pgTx) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	if t.conn == nil {
		return server.ClaimResult{}, interpretError(pgx.ErrTxClosed)
	}
	if err := sqlstore.ValidateClaimRequest(req); err != nil {
		return server.ClaimResult{}, err
	}
	res, decided, err := t.claimFresh(ctx, req)
	if !decided {
		res, err = t.st.tx.Claim(ctx, t.q, req)
	}
	if err == nil && res.Acquired {
		t.expiresAt = req.ExpiresAt
	}
	return res, err
}

// beginQuerier is the pgTx whose first QueryRow is sent in one batch with
// its BEGIN, and everything else on the begun transaction.
type beginQuerier pgTx

func (q *beginQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t := (*pgTx)(q)
	if err := t.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

func (q *beginQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	t := (*pgTx)(q)
	if t.tx != nil && t.conn != nil {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	if t.conn == nil {
		return pgRowFunc(func(dest ...any) error {
			if err := t.begin(ctx); err != nil {
				return err
			}
			return t.tx.QueryRow(ctx, sql, args...).Scan(dest...)
		})
	}
	b := t.beginBatch()
	b.Queue(sql, args...)
	return pgRowFunc(func(dest ...any) error {
		br, err := t.sendBatch(ctx, b, 2)
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

// Complete implements server.StoreTx.Complete. It checks resp and queues the
// completion; Commit sends it with the COMMIT, in one round trip, and
// returns server.ErrLeaseLost (having rolled back) if it matches no claim.
//
// The completion of the claim this transaction acquired, while its window
// has more than heldCompletionMargin left, is a plain UPDATE
// (pgCompleteHeld): the transaction holds the row's lock since its claim,
// so token and state cannot have changed and the window cannot end before
// the UPDATE runs. Any other completion is pgCompleteInTx, which aborts the
// transaction when it matches no row.
func (t *pgTx) Complete(_ context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	_, args, err := t.st.tx.CompleteStatement(sc, token, now, resp)
	if err != nil {
		return err
	}
	t.completeSQL, t.complete = pgCompleteInTx, args
	if t.st.cfg.NotifyChanges {
		t.notify = scopeHash(sc)
	}
	if !t.expiresAt.IsZero() && now.Add(heldCompletionMargin).Before(t.expiresAt) {
		t.completeSQL = pgCompleteHeld
	}
	return nil
}

// heldCompletionMargin is how much of its window a claim must have left for
// its completion to be pgCompleteHeld: far more than the time between the
// caller's now and the UPDATE running (bounded by the Commit's context).
const heldCompletionMargin = 10 * time.Minute

// errHeldCompletionMissed reports a pgCompleteHeld that matched no row.
var errHeldCompletionMissed = errors.New("idemkit/server/pgstore: the completion matched no row although the transaction holds its claim (did the handler change the idempotency_keys row?); the COMMIT behind it may have committed the effect without a stored response")

// pgCompleteInTx is pgComplete failing with division_by_zero (22012) when it
// matches no row, so that the COMMIT sent behind it in the same round trip
// finds the transaction aborted and rolls back.
const pgCompleteInTx = `WITH u AS (` + pgComplete + `
RETURNING 1)
SELECT 1 / count(*) FROM u`

// Commit implements server.StoreTx.Commit, sending a queued completion and the
// COMMIT in one round trip. When the COMMIT was sent but no answer came
// back (the connection broke or ctx ended while it waited), the transaction
// may or may not have committed: the error then wraps ErrOutcomeUnknown as
// well as ErrStoreUnavailable. Only an error PostgreSQL answered means it
// rolled back.
func (t *pgTx) Commit(ctx context.Context) error {
	if t.conn == nil {
		return interpretError(pgx.ErrTxClosed)
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
	if t.notify != "" {
		// Before the completion, whose tag the loop below reads last.
		b.Queue(pgNotify, t.notify)
	}
	b.Queue(t.completeSQL, t.complete...)
	b.Queue("COMMIT")
	br := t.conn.Conn().SendBatch(ctx, b)
	var (
		err    error
		tag    pgconn.CommandTag
		missed bool
	)
	for range len(b.QueuedQueries) - 1 {
		if tag, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil && t.completeSQL == pgCompleteHeld && tag.RowsAffected() != 1 {
		missed = true
	}
	if err != nil {
		_ = br.Close()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "22012" {
			return server.ErrLeaseLost // the transaction is aborted: the COMMIT rolls back
		}
		return pgCommitError(err)
	}
	tag, err = br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		return pgCommitError(err)
	}
	if missed {
		return sqlstore.WrapError(server.ErrOutcomeUnknown, "", errHeldCompletionMissed)
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
		return interpretError(err)
	}
	return sqlstore.WrapError(server.ErrOutcomeUnknown, "the COMMIT was sent but its answer was lost",
		sqlstore.WrapError(server.ErrStoreUnavailable, "", err))
}

// end closes the handle and gives the connection back to the pool, which
// closes it instead if it is still in a transaction or broken.
func (t *pgTx) end() {
	t.conn.Release()
	t.conn = nil
	t.complete, t.completeSQL, t.notify = nil, "", ""
}

// Rollback implements server.StoreTx.Rollback. It is a no-op after Commit or
// Rollback. A canceled ctx does not stop the rollback, but its deadline, or
// rollbackTimeout, bounds it: a rollback that cannot reach the database
// closes the connection, which ends the transaction too.
func (t *pgTx) Rollback(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	defer t.end()
	if t.tx == nil {
		return nil // nothing was sent
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if d, ok := ctx.Deadline(); ok && ctx.Err() == nil {
		rctx, cancel = context.WithDeadline(rctx, d)
		defer cancel()
	}
	err := t.tx.Rollback(rctx)
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return interpretError(err)
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

// Handle implements server.StoreTx.Handle: the pgx.Tx, which fails with
// pgx.ErrTxClosed once the transaction ended.
func (t *pgTx) Handle() any { return t.handle }
