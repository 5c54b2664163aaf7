package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// PrincipalUsage is what one principal holds in a store: its live records
// and the bytes of their stored responses.
type PrincipalUsage struct {
	Keys        int64
	StoredBytes int64
	// OldestExpiresAt is when the principal's oldest live record expires
	// (zero without records): the earliest time usage goes down.
	OldestExpiresAt time.Time
}

// usageReporter is what the per-principal quotas (Config.MaxKeysPerPrincipal,
// Config.MaxStoredBytesPerPrincipal) need of a store besides Store: the
// usage of a principal. pgstore.Store and sqlitestore.Store implement it.
type usageReporter interface {
	// PrincipalUsage returns the usage of principal at now. It reads the
	// principal's rows (an index range scan): its cost grows with the
	// quota.
	PrincipalUsage(ctx context.Context, principal string, now time.Time) (PrincipalUsage, error)
}

// errQuotaExceeded means a principal holds as many live keys, or stored
// response bytes, as its quota allows; a new key is refused, its claim
// freed, before the handler runs. HTTP: 429 quota-exceeded + Retry-After (until its oldest
// record expires). Retries of keys it already holds still replay.
var errQuotaExceeded = errors.New("idemkit/server: per-principal idempotency quota exceeded")

func (m *Middleware) quotasOn() bool {
	return m.cfg.MaxKeysPerPrincipal > 0 || m.cfg.MaxStoredBytesPerPrincipal > 0
}

// quotaGates keeps, per principal and within one process, a lock that
// quota checks take around the usage read, and a count of new keys
// admitted whose claims usage reads may not see yet.
//
// In lease mode a check keeps the lock until its claim has committed, so
// that one replica admits a principal's new keys one claim at a time, each
// counting every committed claim: the key quota is exact on one replica,
// and across R replicas a check misses at most the one claim each other
// replica is making (an overshoot of at most R-1). In transactional mode a claim is not
// visible until the request's transaction commits, so the check reserves a
// place in the count until the transaction ends; the quota is never
// exceeded on one replica (a key whose commit races a check may be counted
// twice and refused for a moment, with Retry-After: 1), and across R
// replicas a burst overshoots by at most the new keys the other replicas
// have in flight at once.
type quotaGates struct {
	mu    sync.Mutex
	gates map[string]*quotaGate
}

// quotaGate is one principal's lock and count of admitted, not yet visible
// new keys.
type quotaGate struct {
	sem     chan struct{} // holds one token while locked
	refs    int           // holders and waiters (under quotaGates.mu)
	pending int64         // under the lock
}

// lock returns principal's gate, locked, or ctx's error if ctx ends first:
// a store that hangs under one request bounds the others' wait too.
func (q *quotaGates) lock(ctx context.Context, principal string) (*quotaGate, error) {
	q.mu.Lock()
	if q.gates == nil {
		q.gates = make(map[string]*quotaGate)
	}
	g := q.gates[principal]
	if g == nil {
		g = &quotaGate{sem: make(chan struct{}, 1)}
		q.gates[principal] = g
	}
	g.refs++
	q.mu.Unlock()
	select {
	case g.sem <- struct{}{}:
		return g, nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		g.refs--
		if g.refs == 0 && g.pending == 0 { // the holder unlocked as ctx ended
			delete(q.gates, principal)
		}
		return nil, ctx.Err()
	}
}

// unlock unlocks g, forgetting it once nobody holds it and it counts
// nothing.
func (q *quotaGates) unlock(principal string, g *quotaGate) {
	pending := g.pending
	<-g.sem
	q.mu.Lock()
	defer q.mu.Unlock()
	g.refs--
	if g.refs == 0 && pending == 0 {
		delete(q.gates, principal)
	}
}

// quotaCheck is the outcome of a request's quota check: over the quotas,
// or under them with the principal's gate held (lease mode) or a place
// reserved (transactional mode) until done.
type quotaCheck struct {
	m         *Middleware
	principal string
	over      bool
	retry     int
	usage     PrincipalUsage
	held      *quotaGate // locked until done
	reserved  *quotaGate // pending counts the key until done
}

// checkQuota checks the quotas for the request's key, before its claim: it
// reads the principal's usage under the principal's lock (see quotaGates).
// Under the quotas it holds the lock (hold) or reserves a place; over them,
// it keeps neither, and the caller claims anyway, to answer a key that
// exists from its record (a key that exists is never refused by a quota),
// and refuses only a key it acquired as new.
func (m *Middleware) checkQuota(ctx context.Context, scope Scope, hold bool) (*quotaCheck, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StoreTimeout)
	defer cancel()
	g, err := m.quotas.lock(ctx, scope.Principal)
	if err != nil {
		return nil, fmt.Errorf("%w: waiting for the quota check of another request of the principal: %w", ErrStoreUnavailable, err)
	}
	now := m.now()
	usage, err := m.usage.PrincipalUsage(ctx, scope.Principal, now)
	if err != nil {
		m.quotas.unlock(scope.Principal, g)
		return nil, err
	}
	q := &quotaCheck{m: m, principal: scope.Principal, usage: usage}
	keys := usage.Keys + g.pending + 1 // the request's key included
	keysOver := m.cfg.MaxKeysPerPrincipal > 0 && keys > m.cfg.MaxKeysPerPrincipal
	bytesOver := m.cfg.MaxStoredBytesPerPrincipal > 0 && usage.StoredBytes >= m.cfg.MaxStoredBytesPerPrincipal
	switch {
	case !keysOver && !bytesOver && hold:
		q.held = g
		return q, nil
	case !keysOver && !bytesOver:
		g.pending++
		q.reserved = g
	default:
		q.over = true
		q.retry = 1 // over only by keys admitted a moment ago: soon settled
		if (m.cfg.MaxKeysPerPrincipal > 0 && usage.Keys >= m.cfg.MaxKeysPerPrincipal || bytesOver) && !usage.OldestExpiresAt.IsZero() {
			q.retry = max(int(math.Ceil(min(usage.OldestExpiresAt.Sub(now), m.cfg.Window).Seconds())), 1)
		}
	}
	m.quotas.unlock(scope.Principal, g)
	return q, nil
}

// done unlocks the gate or gives back the reservation, once the key's claim
// is visible to usage reads or did not happen. It is safe to call more than
// once and on nil.
func (q *quotaCheck) done() {
	switch {
	case q == nil:
	case q.held != nil:
		q.m.quotas.unlock(q.principal, q.held)
		q.held = nil
	case q.reserved != nil:
		g, _ := q.m.quotas.lock(context.Background(), q.principal) // never fails without a deadline
		g.pending--
		q.m.quotas.unlock(q.principal, g)
		q.reserved = nil
	}
}

// refuses reports whether the quotas refuse an acquired claim: a new key
// while over a quota. A takeover continues a key that exists.
func (q *quotaCheck) refuses(res ClaimResult) bool {
	return q != nil && q.over && res.Acquired && !res.TakenOver
}

// quotaExceeded answers a new key refused by a quota: 429 quota-exceeded
// with Retry-After. The key's claim has been freed: nothing is stored.
func (m *Middleware) quotaExceeded(w http.ResponseWriter, q *quotaCheck) answer {
	writeProblem(w, http.StatusTooManyRequests, wire.ProblemQuotaExceeded,
		"This account holds as many idempotency keys or stored responses as the server keeps for it. Retries of keys already used still replay; new keys are accepted again after Retry-After.", q.retry)
	return answer{outcome: OutcomeRejected, status: http.StatusTooManyRequests, storeErr: "quota",
		err: fmt.Errorf("%w: %d live keys, %d stored bytes", errQuotaExceeded, q.usage.Keys, q.usage.StoredBytes)}
}
