package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// A ChangeSubscriber is a Store that can wake a request waiting for an in-flight
// record (Config.WaitInFlight) as soon as that record changes, instead of polling.
// pgstore.Store implements it with LISTEN/NOTIFY; other stores are polled.
type ChangeSubscriber interface {
	// SubscribeChange returns a channel that is closed once the record of s may
	// have changed after the call returned — at least when it is completed or
	// released; possibly spuriously; never later than the change is visible
	// to Get — and a stop function the caller must call. It does not block on
	// the change itself. ctx bounds only the setup. A nil channel with a nil
	// error means that this store does not notify (pgstore.Store without
	// pgstore.Config.NotifyChanges): the caller polls.
	SubscribeChange(ctx context.Context, s Scope) (changed <-chan struct{}, stop func(), err error)
}

// Polling while waiting for an in-flight original: the first interval,
// doubled after every poll up to the last. Under a ChangeSubscriber the
// poll is only a fallback for a lost notification (and, in transactional
// mode, the way a rolled-back original is noticed).
const (
	waitPollMin           = 20 * time.Millisecond
	waitPollMax           = 250 * time.Millisecond
	waitPollSubscribedMin = 250 * time.Millisecond
	waitPollSubscribedMax = time.Second
)

// waitProbeLockTimeout bounds how long the lock probe of a transactional
// waiter waits on the original's uncommitted claim.
const waitProbeLockTimeout = 10 * time.Millisecond

// waiters counts the requests waiting for an in-flight original, in all
// and per principal.
type waiters struct {
	mu          sync.Mutex
	total       int
	byPrincipal map[string]int
}

// enter takes a waiting place for principal, unless a bound is reached.
func (ws *waiters) enter(principal string, maxTotal, maxPerPrincipal int) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.total >= maxTotal || ws.byPrincipal[principal] >= maxPerPrincipal {
		return false
	}
	if ws.byPrincipal == nil {
		ws.byPrincipal = make(map[string]int)
	}
	ws.total++
	ws.byPrincipal[principal]++
	return true
}

// leave gives back a place enter took.
func (ws *waiters) leave(principal string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.total--
	if n := ws.byPrincipal[principal] - 1; n > 0 {
		ws.byPrincipal[principal] = n
	} else {
		delete(ws.byPrincipal, principal)
	}
}

// Waiting returns how many requests are waiting for an in-flight original
// at this moment (Config.WaitInFlight). Package server/prommetrics exports
// it as the gauge idemkit_server_waiting.
func (m *Middleware) Waiting() int {
	m.waiting.mu.Lock()
	defer m.waiting.mu.Unlock()
	return m.waiting.total
}

// MaxWaiting returns Config.MaxWaiting, defaults applied: the most
// requests of m that wait for an in-flight original at once. Package
// server/prommetrics exports it as the gauge idemkit_server_max_waiting,
// so that a rule can compare Waiting with it.
func (m *Middleware) MaxWaiting() int { return m.cfg.MaxWaiting }

// waitVerdict is what one look at a waited-for record found.
type waitVerdict int

const (
	// waitKeep: the original is still in flight; keep waiting (or, from
	// await, give up: answer 409 as without waiting).
	waitKeep waitVerdict = iota
	// waitAnswer: answer from the record (a replay, or a 422).
	waitAnswer
	// waitClaim: the original released its claim or its lease lapsed;
	// claim the key again, as a new request would.
	waitClaim
)

// waitCheck looks at the waited-for record once. With waitKeep it returns
// the in-progress record, if it saw one.
type waitCheck func(ctx context.Context) (waitVerdict, *Record, error)

// waitSession is one request's waiting for its in-flight original: its
// deadline counts from the first wait and holds across claims again.
type waitSession struct {
	m        *Middleware
	tr       *trace
	started  time.Time
	deadline time.Time
	interval time.Duration
	// claimedAgain is set when await last said to claim again: the claim
	// found the key in flight once more (another request won it, or the
	// store's clock does not yet see the lease lapsed), so the next await
	// waits a poll interval before it looks, rather than spin.
	claimedAgain bool
}

// newWaitSession returns the waiting of a request, or nil when
// Config.WaitInFlight is off. A request that already waited (for a
// legacy-scope original, see awaitLegacy) continues the same wait: its
// deadline still counts from its first wait.
func (m *Middleware) newWaitSession(tr *trace) *waitSession {
	if m.cfg.WaitInFlight <= 0 {
		return nil
	}
	s := &waitSession{m: m, tr: tr}
	if tr.waited > 0 {
		s.started = time.Now().Add(-tr.waited)
	}
	return s
}

// await waits for the in-flight original of the request's scope, checking
// its record with check at every wake-up, until check says to answer or to
// claim again, the wait's limit passes, or ctx ends. It returns waitKeep
// (with the last in-progress record seen, if any) when the request should
// be answered 409 as without waiting: the limit passed, waiting is off
// (s is nil) or a bound on waiting requests was reached. An error is a
// store failure or ctx's error. While it waits it holds no store
// connection: the store wakes it (ChangeSubscriber) or it polls.
func (s *waitSession) await(ctx context.Context, check waitCheck) (waitVerdict, *Record, error) {
	if s == nil {
		return waitKeep, nil, nil
	}
	return s.awaitScope(ctx, s.tr.scope, check)
}

// awaitScope is await for the original in flight under scope, which is
// the request's own scope or its legacy one (Config.LegacyEndpointFunc):
// the waiting place is the request's principal's, the store's change
// notification that of scope.
func (s *waitSession) awaitScope(ctx context.Context, scope Scope, check waitCheck) (waitVerdict, *Record, error) {
	if s == nil || s.tr.waitRefused {
		return waitKeep, nil, nil
	}
	m := s.m
	if !m.waiting.enter(scope.Principal, m.cfg.MaxWaiting, m.cfg.MaxWaitingPerPrincipal) {
		s.tr.waitRefused = true
		m.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "idemkit: too many requests waiting; answering 409 at once",
			scopeAttrs(scope)...)
		return waitKeep, nil, nil
	}
	defer m.waiting.leave(scope.Principal)
	sub, subscribes := m.store.(ChangeSubscriber)
	maxInterval := waitPollMax
	if subscribes {
		maxInterval = waitPollSubscribedMax
	}
	if s.deadline.IsZero() {
		if s.started.IsZero() {
			s.started = time.Now()
		}
		s.deadline = s.started.Add(m.cfg.WaitInFlight)
		s.interval = waitPollMin
		if subscribes {
			s.interval = waitPollSubscribedMin
		}
	}
	defer func() { s.tr.waited = time.Since(s.started) }()

	skipCheck := s.claimedAgain
	s.claimedAgain = false
	for {
		var changed <-chan struct{}
		stop := func() {}
		if subscribes {
			subCtx, cancel := context.WithTimeout(ctx, m.cfg.StoreTimeout)
			ch, st, err := sub.SubscribeChange(subCtx, scope)
			cancel()
			switch {
			case err == nil && ch == nil:
				// The store does not notify (pgstore without
				// NotifyChanges): poll as for a store that cannot.
				if st != nil {
					st()
				}
				subscribes, maxInterval = false, waitPollMax
				s.interval = min(s.interval, waitPollMin)
			case err == nil:
				changed, stop = ch, st
			case ctx.Err() == nil:
				// Polling still finds the change.
				m.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "idemkit: could not subscribe to the record's changes; polling",
					scopeAttrs(scope, slog.Any("error", err))...)
			}
		}
		var rec *Record
		if !skipCheck {
			verdict, r, err := check(ctx)
			if err != nil || verdict != waitKeep {
				stop()
				s.claimedAgain = verdict == waitClaim
				return verdict, r, err
			}
			rec = r
		}
		skipCheck = false
		left := time.Until(s.deadline)
		if left <= 0 {
			stop()
			return waitKeep, rec, nil
		}
		t := time.NewTimer(min(s.interval, left))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			stop()
			return waitKeep, nil, ctx.Err()
		}
		t.Stop()
		stop()
		s.interval = min(2*s.interval, maxInterval)
	}
}

// awaitLegacy waits for the original in flight under legacy, the
// request's legacy endpoint scope (Config.LegacyEndpointFunc), whose
// in-progress record rec the legacy lookup found: an original sent to a
// replica that still runs the former endpoint default. It answers the
// request from the record once that is completed (a replay), or with 409
// as without waiting when the wait ends first or waiting is off. It
// answers nothing (false) when the legacy record is gone (released, or
// expired): the request goes on under its own scope, and a later wait
// there continues this one. A legacy record whose lease lapsed is not
// claimed: it keeps answering 409, as without waiting, until it expires.
func (m *Middleware) awaitLegacy(w http.ResponseWriter, r *http.Request, legacy Scope, rec *Record, fps requestFingerprint, tr *trace) (answer, bool) {
	verdict, last, err := m.newWaitSession(tr).awaitScope(r.Context(), legacy, m.legacyWaitCheck(legacy, fps))
	switch {
	case err != nil:
		return m.storeFailure(w, r, tr.scope, "get_legacy", err), true
	case verdict == waitClaim:
		return answer{}, false
	case last != nil:
		rec = last // completed (a replay), or the latest in-progress record (409)
	}
	return m.answerExisting(w, r, rec, fps, tr), true
}

// legacyWaitCheck is the waitCheck of a legacy-scope original: a completed
// record (or one of another request) answers, a record gone lets the
// request go on under its own scope, and an in-progress one is waited
// for, its lease lapsed or not (only a request under the legacy scope
// could take it over).
func (m *Middleware) legacyWaitCheck(legacy Scope, fps requestFingerprint) waitCheck {
	return func(ctx context.Context) (waitVerdict, *Record, error) {
		rec, err := m.getForWait(ctx, legacy)
		switch {
		case errors.Is(err, ErrRecordNotFound):
			return waitClaim, nil, nil
		case err != nil:
			return waitKeep, nil, err
		case rec.State == StateCompleted || !fps.matches(rec):
			return waitAnswer, rec, nil
		}
		return waitKeep, rec, nil
	}
}

// getForWait reads the record of scope for a waiter, bounded by
// Config.StoreTimeout.
func (m *Middleware) getForWait(ctx context.Context, scope Scope) (*Record, error) {
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.StoreTimeout)
	defer cancel()
	return m.store.Get(callCtx, scope, m.now())
}
