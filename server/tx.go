package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// serveTx runs a request in transactional mode: the claim, the handler's
// effect and the stored response commit in one transaction.
func (m *Middleware) serveTx(w http.ResponseWriter, r *http.Request, next http.Handler, fps requestFingerprint, tr *trace) answer {
	waiting := m.newWaitSession(tr)
	for {
		if a, answered := m.serveTxOnce(w, r, next, fps, tr, waiting); answered {
			return a
		}
		// The in-flight original this request waited for rolled back:
		// claim again, as a new request would.
	}
}

// serveTxOnce claims the scope once and answers the request, unless it
// waited for an in-flight original that rolled back and should claim
// again: then it answers nothing and returns false. Its transaction is
// rolled back before it waits.
func (m *Middleware) serveTxOnce(w http.ResponseWriter, r *http.Request, next http.Handler, fps requestFingerprint, tr *trace, waiting *waitSession) (a answer, answered bool) {
	ctx, scope := r.Context(), tr.scope
	// Fast path for replays: a completed record never changes until it
	// expires, so a plain read answers a duplicate without a transaction (and,
	// on SQLite, without waiting for the single writer). Absence proves
	// nothing here; only the claim below decides who runs the handler. A
	// store whose transactional claim answers replays itself (pgstore) skips
	// this read: its claim reads a completed record in the same round trip.
	if rf, ok := m.store.(txClaimReplayer); !ok || !rf.TxClaimAnswersReplays() {
		getCtx, cancelGet := context.WithTimeout(ctx, m.cfg.StoreTimeout)
		existing, err := m.store.Get(getCtx, scope, m.now())
		cancelGet()
		if err == nil && existing.State == StateCompleted {
			return m.answerExisting(w, r, existing, fps, tr), true
		}
	}
	// Under the quotas, a key is checked before its claim; a key that
	// exists is answered from its record, never refused (see checkQuota).
	// The reservation lasts until the transaction has ended (the deferred
	// done runs after the deferred rollback below).
	var quota *quotaCheck
	if m.quotasOn() {
		q, err := m.checkQuota(ctx, scope, false)
		if err != nil {
			return m.storeFailure(w, r, scope, "usage", err), true
		}
		quota = q
		defer quota.done()
	}
	// BeginTx and the claim share one StoreTimeout: between them they wait
	// for a connection and, bounded by LockTimeout, for a concurrent claim
	// of the scope.
	callCtx, cancelCall := context.WithTimeout(ctx, m.cfg.StoreTimeout)
	tx, err := m.store.BeginTx(callCtx, m.cfg.LockTimeout)
	if err != nil {
		cancelCall()
		return m.storeFailure(w, r, scope, "begin", err), true
	}
	req := m.claimRequest(scope, fps, m.cfg.LockTimeout)
	t0 := time.Now()
	res, err := tx.Claim(callCtx, req)
	cancelCall()
	tr.claimDuration = time.Since(t0)
	if err != nil || !res.Acquired {
		// Nothing of this request's is in the transaction (on pgstore, a
		// replay's claim began it and wrote nothing).
		m.rollback(ctx, tx, scope)
		ex := res.Existing
		if errors.Is(err, ErrInFlight) || (err == nil && ex != nil && ex.State == StateInProgress && fps.matches(ex)) {
			// The original's claim is in flight. The transaction is over
			// and this request reserves no quota place: a waiting request
			// holds neither.
			quota.done()
			verdict, rec, waitErr := waiting.await(ctx, m.txWaitCheck(scope, fps))
			switch {
			case waitErr != nil:
				return m.storeFailure(w, r, scope, "get", waitErr), true
			case verdict == waitClaim:
				return answer{}, false
			case verdict == waitAnswer:
				return m.answerExisting(w, r, rec, fps, tr), true
			}
		}
		if err != nil {
			return m.storeFailure(w, r, scope, "claim", err), true
		}
		return m.answerExisting(w, r, ex, fps, tr), true
	}
	cleanup := context.WithoutCancel(ctx)
	if quota.refuses(res) {
		m.rollback(cleanup, tx, scope)
		return m.quotaExceeded(w, quota), true
	}
	t := &txClaim{m: m, ctx: cleanup, tx: tx, tr: tr}
	defer t.end() // a no-op after Commit or Rollback
	tr.acquired(res)
	t.token = res.Token
	requestValuesOf(ctx).claim(attemptOf(res), tx.Handle())
	return m.runHeld(w, r, ctx, cleanup, next, t, tr), true
}

// txClaimReplayer is a Store whose StoreTx.Claim, first in its
// transaction, answers a live completed record itself without a lock, as
// the middleware's own read before BeginTx would.
type txClaimReplayer interface {
	TxClaimAnswersReplays() bool
}

// commitUnknown answers a transactional request whose COMMIT was sent but
// whose answer was lost: the transaction may have committed. The record is
// read again; if it holds this claim's completion, the commit happened and
// the handler's response is sent. Otherwise the answer is outcome-unknown,
// never "nothing was applied": the commit may still have happened, and a
// retry with the same key replays it if so.
func (m *Middleware) commitUnknown(w http.ResponseWriter, r *http.Request, rec *recorder, scope Scope, token int64, err error) answer {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.cfg.StoreTimeout)
	defer cancel()
	stored, getErr := m.store.Get(ctx, scope, m.now())
	if getErr == nil && stored.State == StateCompleted && stored.Token == token {
		m.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "idemkit: the COMMIT's answer was lost, but the record shows it committed",
			scopeAttrs(scope, slog.Any("error", err))...)
		status, _ := rec.result()
		rec.send(nil)
		return answer{outcome: OutcomeExecuted, status: status}
	}
	return m.outcomeUnknown(w, r, scope, errors.Join(err, getErr),
		"The result was sent to the database but its confirmation was lost, so it may or may not have been applied. Retry with the same Idempotency-Key: a retry replays the result if it was applied.")
}

// txClaim is the heldClaim of transactional mode: the claim, the handler's
// effect and the stored response commit together in tx, or not at all.
type txClaim struct {
	m     *Middleware
	ctx   context.Context // the request's, without its cancellation
	tx    StoreTx
	tr    *trace
	token int64
	op    string // the store call finish failed at
	ended bool   // committed: end has nothing to roll back
}

func (t *txClaim) finish(ctx context.Context, _ *http.Request, resp *StoredResponse) error {
	callCtx, cancel := context.WithTimeout(ctx, t.m.cfg.StoreTimeout)
	defer cancel()
	t.op = "complete"
	if err := t.tx.Complete(callCtx, t.tr.scope, t.token, t.m.now(), resp); err != nil {
		return err
	}
	t.op = "commit"
	if err := t.tx.Commit(callCtx); err != nil {
		return err
	}
	t.ended = true
	return nil
}

func (t *txClaim) abandon(context.Context, *http.Request) {
	t.end()
	t.tr.released = true
}

func (t *txClaim) lostErr() error { return nil }

func (t *txClaim) effectSurvivesFailure() bool { return false }

// answerFailure answers a transaction that did not commit: 503, nothing was
// applied; or, when the COMMIT's answer was lost, whatever the record shows.
func (t *txClaim) answerFailure(w http.ResponseWriter, r *http.Request, rec *recorder, err error) (answer, bool) {
	m, scope := t.m, t.tr.scope
	t.end()
	if errors.Is(err, ErrOutcomeUnknown) {
		a := m.commitUnknown(w, r, rec, scope, t.token, err)
		a.storeErr = t.op
		return a, true
	}
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "idemkit: transaction failed after the handler ran; its effect was rolled back",
		scopeAttrs(scope, slog.String("op", t.op), slog.Any("error", err))...)
	slug := wire.ProblemStoreUnavailable
	if errors.Is(err, ErrStoreBusy) {
		slug = wire.ProblemStoreBusy
	}
	writeProblem(w, http.StatusServiceUnavailable, slug,
		"The result could not be committed, so nothing was applied. Retry with the same Idempotency-Key.", 1)
	return answer{outcome: OutcomeStoreError, status: http.StatusServiceUnavailable, err: err, storeErr: t.op}, true
}

// end rolls the transaction back; a no-op after Commit or Rollback. A
// canceled request does not stop the rollback; Config.StoreTimeout bounds
// it.
func (t *txClaim) end() {
	if t.ended {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.m.cfg.StoreTimeout)
	defer cancel()
	t.m.rollback(ctx, t.tx, t.tr.scope)
}

// rollback rolls tx back, logging a failure: the database ends the
// transaction when the connection closes.
func (m *Middleware) rollback(ctx context.Context, tx StoreTx, scope Scope) {
	if err := tx.Rollback(ctx); err != nil {
		m.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemkit: rollback failed; the database ends the transaction when the connection closes",
			scopeAttrs(scope, slog.Any("error", err))...)
	}
}

// txWaitCheck is the waitCheck of transactional mode, whose in-flight
// claims are invisible until they commit: a completed record answers;
// without one, a claim that waits at most waitProbeLockTimeout on the
// original's lock, rolled back at once, tells a running original (the lock
// is held) from one that rolled back (claim again).
func (m *Middleware) txWaitCheck(scope Scope, fps requestFingerprint) waitCheck {
	return func(ctx context.Context) (waitVerdict, *Record, error) {
		rec, err := m.getForWait(ctx, scope)
		switch {
		case err == nil && (rec.State == StateCompleted || !fps.matches(rec)):
			return waitAnswer, rec, nil
		case err != nil && !errors.Is(err, ErrRecordNotFound):
			return waitKeep, nil, err
		}
		probe := min(m.cfg.LockTimeout, waitProbeLockTimeout)
		callCtx, cancel := context.WithTimeout(ctx, m.cfg.StoreTimeout)
		defer cancel()
		tx, err := m.store.BeginTx(callCtx, probe)
		if err != nil {
			if errors.Is(err, ErrStoreBusy) || errors.Is(err, ErrInFlight) {
				return waitKeep, nil, nil
			}
			return waitKeep, nil, err
		}
		res, err := tx.Claim(callCtx, m.claimRequest(scope, fps, probe))
		rbCtx, cancelRb := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.StoreTimeout)
		m.rollback(rbCtx, tx, scope)
		cancelRb()
		switch {
		case errors.Is(err, ErrInFlight) || errors.Is(err, ErrStoreBusy):
			return waitKeep, nil, nil
		case err != nil:
			return waitKeep, nil, err
		case res.Acquired:
			return waitClaim, nil, nil
		case res.Existing != nil && (res.Existing.State == StateCompleted || !fps.matches(res.Existing)):
			return waitAnswer, res.Existing, nil
		}
		return waitKeep, res.Existing, nil
	}
}
