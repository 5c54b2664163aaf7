package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// errLeaseRanOut is the cause of a lease-mode handler's cancellation when
// the heartbeat could not reach the store before the lease ended.
var errLeaseRanOut = fmt.Errorf("%w: the lease ran out because the store could not be reached to extend it", ErrLeaseLost)

// Completion retries in lease mode: the backoff between attempts, and how
// long, in leases, a store that answers but refuses the completion is
// retried before the middleware gives up and lets the lease lapse.
const (
	completeBackoffMin    = 20 * time.Millisecond
	completeBackoffMax    = time.Second
	completeHorizonLeases = 2
)

// leaseMarginDivisor sets the part of every lease its holder gives up: the
// holder's own deadline is LeaseDuration/leaseMarginDivisor (5%) before the
// end the store reckons, so that a local clock running up to 5% slow next to
// the store's (or a timer firing late on a loaded host) still cancels the
// handler before any other attempt can take the claim over.
const leaseMarginDivisor = 20

// heldUntil is the instant until which after sent a claim or extension of lease, sent at sent
// and granted delay later by the store (ClaimResult.LeaseDelay), is surely
// held by the store's reckoning, less the clock margin.
func heldUntil(sent time.Time, delay, lease time.Duration) time.Time {
	return sent.Add(max(delay, 0) + lease - lease/leaseMarginDivisor)
}

// lease is a held lease-mode claim. A heartbeat extends it every
// LeaseDuration/3. By the local monotonic clock it knows until when the
// claim is surely held: from when the last confirmed claim or extension was
// sent (the store counts the lease from a later instant, when it received
// it, or reports how much later with ClaimResult.LeaseDelay), plus
// LeaseDuration, less a margin for clock rate (leaseMarginDivisor). Once the
// lease is lost (a takeover refused an extension, or that time came without
// a confirmed extension) it cancels the handler's context with a cause
// wrapping ErrLeaseLost. The deadline is kept whatever the store path does:
// extensions run apart from it, so one that hangs on a frozen path does not
// delay the cancellation.
//
// The heartbeat starts lazily: nearly every handler returns well within
// the first LeaseDuration/3, so a request holds only a timer until then,
// and the heartbeat's goroutine, ticker and deadline timer start when it
// fires (or at once when the deadline comes first).
type lease struct {
	m             *Middleware
	scope         Scope
	token         int64
	cancelHandler context.CancelCauseFunc
	// tr is the request's trace. Only the request's goroutine writes it
	// (complete, stop); the heartbeat counts into extendErrors and lost,
	// which stop adds to it.
	tr *trace

	mu         sync.Mutex
	heldUntil  time.Time
	err        error // why the lease was lost; nil while held
	completing bool  // the completion runs: a refused extension is no news
	// extendErrors and lostCount are the heartbeat's failed extensions and
	// lost leases, for the event.
	extendErrors int
	lostCount    int

	// The channels are made when first needed (most handlers return
	// before the heartbeat's first tick and need none): lost by lostCh,
	// stopCh and done by heartbeatChans. All are read and set under mu.
	lost     chan struct{} // closed once err is set
	start    *time.Timer   // runs the heartbeat; stopped by stop if it has not fired
	stopOnce sync.Once
	stopCh   chan struct{} // closed by stop for a started heartbeat
	done     chan struct{} // closed when a started heartbeat has ended
}

// startLease arms the heartbeat of the claim of scope with token, whose
// claim call was sent at sent and granted res.LeaseDelay later.
func (m *Middleware) startLease(ctx context.Context, tr *trace, res ClaimResult, sent time.Time, cancelHandler context.CancelCauseFunc) *lease {
	l := &lease{
		m: m, scope: tr.scope, token: res.Token, cancelHandler: cancelHandler, tr: tr,
		heldUntil: heldUntil(sent, res.LeaseDelay, m.cfg.LeaseDuration),
	}
	first := min(m.cfg.LeaseDuration/3, time.Until(l.heldUntil))
	l.start = time.AfterFunc(first, func() { l.run(ctx) })
	return l
}

// extension is the outcome of one ExtendLease call, sent at sent.
type extension struct {
	sent time.Time
	err  error
}

// run is the heartbeat, from its first tick (or the deadline, if that came
// first) until stop or the lease is lost.
func (l *lease) run(ctx context.Context) {
	stopCh, done := l.heartbeatChans()
	defer close(done)
	m := l.m
	select {
	case <-stopCh:
		return // stopped as the timer fired
	default:
	}
	interval := m.cfg.LeaseDuration / 3
	tick := time.NewTicker(interval)
	defer tick.Stop()
	lapse := time.NewTimer(time.Until(l.until()))
	defer lapse.Stop()
	// An extension runs in a goroutine of its own, so that the lapse is
	// served on time while a call hangs; at most one is out at a time.
	callCtx, cancelCalls := context.WithCancel(ctx)
	results := make(chan extension, 1)
	inFlight := false
	defer func() {
		cancelCalls()
		if inFlight {
			<-results
		}
	}()
	extend := func() {
		inFlight = true
		go func() {
			sent := time.Now() // before the now the store may count from
			c, cancel := context.WithTimeout(callCtx, min(m.cfg.StoreTimeout, interval))
			err := m.store.ExtendLease(c, l.scope, l.token, m.now(), m.cfg.LeaseDuration)
			cancel()
			results <- extension{sent: sent, err: err}
		}()
	}
	if time.Until(l.until()) > 0 {
		extend() // the first tick
	}
	for {
		select {
		case <-stopCh:
			return
		case <-lapse.C:
			if left := time.Until(l.until()); left > 0 {
				lapse.Reset(left)
				continue
			}
			if inFlight {
				// An extension was sent but not confirmed in time: it
				// failed, whatever it answers later.
				l.mu.Lock()
				l.extendErrors++
				l.mu.Unlock()
			}
			l.lose(ctx, errLeaseRanOut)
			return
		case <-tick.C:
			if inFlight {
				continue // the last call is still out; it times out within an interval
			}
			extend()
		case res := <-results:
			inFlight = false
			moved, stop := l.extended(ctx, res)
			if stop {
				return
			}
			if moved {
				lapse.Reset(time.Until(l.until()))
			}
		}
	}
}

// extended handles an extension's outcome and reports whether it moved the
// deadline and whether the heartbeat is over. A refused one loses the lease
// (unless the completion runs, which sees the refusal itself); a failed one
// is counted and the deadline stays.
func (l *lease) extended(ctx context.Context, res extension) (moved, stop bool) {
	m := l.m
	switch {
	case res.err == nil:
		l.mu.Lock()
		defer l.mu.Unlock()
		// The store confirmed a lease from no earlier than sent.
		if until := heldUntil(res.sent, 0, m.cfg.LeaseDuration); until.After(l.heldUntil) {
			l.heldUntil = until
		}
		return true, false
	case errors.Is(res.err, ErrLeaseLost):
		l.mu.Lock()
		completing := l.completing
		l.mu.Unlock()
		if completing {
			// Either the completion just stored the response (the record
			// is no longer in progress) or the completion will see the
			// takeover itself.
			return false, true
		}
		l.lose(ctx, fmt.Errorf("%w: another attempt took the claim over", ErrLeaseLost))
		return false, true
	default:
		l.mu.Lock()
		l.extendErrors++
		l.mu.Unlock()
		m.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemkit: could not extend the lease; retrying until it runs out",
			scopeAttrs(l.scope, slog.Int64("token", l.token), slog.Any("error", res.err))...)
		return false, false
	}
}

func (l *lease) until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldUntil
}

// lose records why the lease was lost and cancels the handler's context.
func (l *lease) lose(ctx context.Context, err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.lostCount++
	if l.lost != nil {
		close(l.lost)
	}
	l.mu.Unlock()
	l.m.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemkit: lease lost while the handler runs; its context is canceled",
		scopeAttrs(l.scope, slog.Int64("token", l.token), slog.Any("error", err))...)
	l.cancelHandler(err)
}

// lostCh returns a channel closed once the lease is lost.
func (l *lease) lostCh() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.err != nil {
			close(l.lost)
		}
	}
	return l.lost
}

// heartbeatChans returns the channels a started heartbeat and stop share,
// made by whichever of the two asks first.
func (l *lease) heartbeatChans() (stopCh, done chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopCh == nil {
		l.stopCh, l.done = make(chan struct{}), make(chan struct{})
	}
	return l.stopCh, l.done
}

// lostErr returns why the lease was lost, or nil while it is held.
func (l *lease) lostErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// stop stops the heartbeat and waits for it. It is safe to call more than
// once.
func (l *lease) stop() {
	l.stopOnce.Do(func() {
		if !l.start.Stop() {
			// The heartbeat started: stop it and wait for it to end.
			stopCh, done := l.heartbeatChans()
			close(stopCh)
			<-done
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for range l.extendErrors {
			l.tr.storeError("extend_lease")
		}
		l.tr.leaseLost += l.lostCount
	})
}

// complete stores resp for the claim and stops the heartbeat. A failure is
// logged and returned, but the caller still sends the response: the
// handler's effect happened.
//
// A completion that cannot be written must not let a retry run the handler
// again, so while the lease is held the heartbeat keeps it alive and the
// completion is retried with backoff. A body the store has no room for
// (ErrStoreFull, or any error that is not a transient store failure) is
// dropped and the outcome stored without it, as for a body over
// Config.MaxResponseBytes. Only when the lease is lost (the store could not
// be reached to extend it, or another attempt took it over), or the store
// keeps refusing for completeHorizonLeases leases, does it give up; the
// next attempt then learns that this one's outcome is unknown (see
// Attempt.PreviousOutcomeUnknown).
func (l *lease) complete(ctx context.Context, r *http.Request, resp *StoredResponse) error {
	m := l.m
	l.mu.Lock()
	l.completing = true
	l.mu.Unlock()
	defer l.stop()
	giveUp := time.Now().Add(completeHorizonLeases * m.cfg.LeaseDuration)
	wait := completeBackoffMin
	attempts := 0
	for {
		attempts++
		callCtx, cancel := context.WithTimeout(ctx, m.cfg.StoreTimeout)
		err := m.store.Complete(callCtx, l.scope, l.token, m.now(), resp)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrLeaseLost) && attempts > 1 && l.completedByThisClaim(ctx):
			// An earlier attempt's answer was lost after the store applied
			// it: the record is completed with this claim's token.
			m.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo,
				"idemkit: the completion's answer was lost, but the record shows it was stored",
				scopeAttrs(l.scope, slog.Int64("token", l.token))...)
			return nil
		case errors.Is(err, ErrLeaseLost):
			l.tr.leaseLost++
			m.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn,
				"idemkit: lease lost before completion; the response is sent but not stored (another attempt took the claim over)",
				scopeAttrs(l.scope, slog.Int64("token", l.token))...)
			return err
		case !resp.BodyOmitted && errors.Is(err, ErrStoreFull):
			l.tr.storeError("complete")
			m.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn,
				"idemkit: the store cannot take the response body; storing the outcome without it (a replay sends Idempotent-Response-Omitted)",
				scopeAttrs(l.scope, slog.Int64("token", l.token), slog.Int("body_bytes", len(resp.Body)), slog.Any("error", err))...)
			resp = withoutBody(resp)
			continue
		}
		l.tr.storeError("complete")
		if time.Now().After(giveUp) {
			m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError,
				"idemkit: the store kept refusing the completion; giving up, the lease will lapse and the next attempt's outcome check must reconcile",
				scopeAttrs(l.scope, slog.Int64("token", l.token), slog.Any("error", err))...)
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-l.lostCh():
			t.Stop()
			lost := l.lostErr()
			m.cfg.Logger.LogAttrs(r.Context(), slog.LevelError,
				"idemkit: lease lost before the response could be stored; it is sent, and the next attempt is told the outcome is unknown",
				scopeAttrs(l.scope, slog.Int64("token", l.token), slog.Any("error", err), slog.Any("lease", lost))...)
			return errors.Join(err, lost)
		}
		wait = min(2*wait, completeBackoffMax)
	}
}

// completedByThisClaim reports whether the record holds a completion with
// this claim's token: a completion whose answer was lost, then refused on
// retry because it had already been applied.
func (l *lease) completedByThisClaim(ctx context.Context) bool {
	callCtx, cancel := context.WithTimeout(ctx, l.m.cfg.StoreTimeout)
	defer cancel()
	rec, err := l.m.store.Get(callCtx, l.scope, l.m.now())
	return err == nil && rec.State == StateCompleted && rec.Token == l.token
}

// withoutBody returns a copy of resp without its body, marked omitted.
func withoutBody(resp *StoredResponse) *StoredResponse {
	c := *resp
	c.Body, c.BodyOmitted = nil, true
	return &c
}

// serveLease runs a request in lease mode: the claim commits, with a
// lease, before the handler runs.
func (m *Middleware) serveLease(w http.ResponseWriter, r *http.Request, next http.Handler, fps requestFingerprint, tr *trace) answer {
	waiting := m.newWaitSession(tr)
	for {
		if a, answered := m.serveLeaseOnce(w, r, next, fps, tr, waiting); answered {
			return a
		}
		// The in-flight original this request waited for is gone (released,
		// or its lease lapsed): claim again, as a new request would.
	}
}

// serveLeaseOnce claims the scope once and answers the request, unless it
// waited for an in-flight original that is gone and should claim again:
// then it answers nothing and returns false.
func (m *Middleware) serveLeaseOnce(w http.ResponseWriter, r *http.Request, next http.Handler, fps requestFingerprint, tr *trace, waiting *waitSession) (a answer, answered bool) {
	ctx, scope := r.Context(), tr.scope
	if err := ctx.Err(); err != nil {
		return m.storeFailure(w, r, scope, "claim", err), true
	}
	cleanup := context.WithoutCancel(ctx)
	// The local deadline counts from t0, taken before the claim's time: the
	// store counts its lease from that time or later.
	t0 := time.Now()
	req := m.claimRequest(scope, fps, m.cfg.LeaseDuration)
	// The claim commits on its own: a client that disconnects mid-statement
	// must not leave a committed claim this process never learns about (and
	// so never releases), so the claim runs on a context the request cannot
	// cancel, bounded by Config.StoreTimeout instead.
	claimCtx, cancelClaim := context.WithTimeout(cleanup, m.cfg.StoreTimeout)
	// Under the quotas, a key is checked before its claim; a key that
	// exists is answered from its record, never refused (see checkQuota).
	var quota *quotaCheck
	if m.quotasOn() {
		q, err := m.checkQuota(cleanup, scope, true)
		if err != nil {
			cancelClaim()
			return m.storeFailure(w, r, scope, "usage", err), true
		}
		quota = q
		defer quota.done()
	}
	res, err := m.store.Claim(claimCtx, req)
	if ex := res.Existing; err == nil && ex != nil && ex.State == StateInProgress &&
		ex.FingerprintVersion != req.FingerprintVersion && fps.matches(ex) {
		// A claim stored under an older fingerprint version, whose lease may
		// have lapsed: the store takes over only a claim with the same
		// fingerprint, so claim again with the record's own.
		req.Fingerprint, req.FingerprintVersion = ex.Fingerprint, ex.FingerprintVersion
		res, err = m.store.Claim(claimCtx, req)
	}
	cancelClaim()
	tr.claimDuration = time.Since(t0)
	quota.done() // the claim, if any, is committed: usage reads see it
	if err != nil {
		return m.storeFailure(w, r, scope, "claim", err), true
	}
	if !res.Acquired {
		ex := res.Existing
		if ex != nil && ex.State == StateInProgress && fps.matches(ex) {
			verdict, rec, err := waiting.await(ctx, m.leaseWaitCheck(scope, fps))
			switch {
			case err != nil:
				return m.storeFailure(w, r, scope, "get", err), true
			case verdict == waitClaim:
				return answer{}, false
			case rec != nil:
				ex = rec // completed (a replay), or the latest in-progress record (409)
			}
		}
		return m.answerExisting(w, r, ex, fps, tr), true
	}
	if quota.refuses(res) {
		m.release(cleanup, r, tr, res.Token)
		tr.released = false // nothing of the request's ran
		return m.quotaExceeded(w, quota), true
	}
	if err := ctx.Err(); err != nil {
		// Claimed for a client that is gone: free the key at once rather
		// than holding it for a whole lease.
		m.release(cleanup, r, tr, res.Token)
		return m.storeFailure(w, r, scope, "claim", err), true
	}
	tr.acquired(res)
	hctx, cancelHandler := context.WithCancelCause(ctx)
	defer cancelHandler(nil)
	l := m.startLease(cleanup, tr, res, t0, cancelHandler)
	defer l.end()
	requestValuesOf(ctx).claim(attemptOf(res), nil)
	return m.runHeld(w, r.WithContext(hctx), ctx, cleanup, next, l, tr), true
}

// release frees a lease-mode claim after a 5xx or a panic.
func (m *Middleware) release(ctx context.Context, r *http.Request, tr *trace, token int64) {
	scope := tr.scope
	tr.released = true
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.StoreTimeout)
	defer cancel()
	err := m.store.Release(callCtx, scope, token)
	if err == nil {
		return
	}
	if errors.Is(err, ErrLeaseLost) {
		tr.leaseLost++
	} else {
		tr.storeError("release")
	}
	m.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "idemkit: could not release the claim; a retry waits for the lease to end",
		scopeAttrs(scope, slog.Int64("token", token), slog.Any("error", err))...)
}

// leaseWaitCheck is the waitCheck of lease mode, whose in-flight claims
// are committed: a completed record (or one of another request) answers,
// a released one or a lapsed lease is claimed again.
func (m *Middleware) leaseWaitCheck(scope Scope, fps requestFingerprint) waitCheck {
	return func(ctx context.Context) (waitVerdict, *Record, error) {
		rec, err := m.getForWait(ctx, scope)
		switch {
		case errors.Is(err, ErrRecordNotFound):
			return waitClaim, nil, nil
		case err != nil:
			return waitKeep, nil, err
		case rec.State == StateCompleted || !fps.matches(rec):
			return waitAnswer, rec, nil
		case !rec.LockedUntil.After(m.now()):
			return waitClaim, nil, nil // the claim takes the lapsed lease over
		}
		return waitKeep, rec, nil
	}
}

// The lease is the heldClaim of lease mode.

func (l *lease) finish(ctx context.Context, r *http.Request, resp *StoredResponse) error {
	return l.complete(ctx, r, resp)
}

func (l *lease) abandon(ctx context.Context, r *http.Request) {
	l.stop()
	l.m.release(ctx, r, l.tr, l.token)
}

func (l *lease) effectSurvivesFailure() bool { return true }

// answerFailure answers nothing: the handler's effect happened, and
// complete has logged why its outcome could not be stored.
func (l *lease) answerFailure(http.ResponseWriter, *http.Request, *recorder, error) (answer, bool) {
	return answer{}, false
}

func (l *lease) end() { l.stop() }
