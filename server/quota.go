package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
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
// response bytes, as its quota allows; a new key is refused before anything
// is stored. HTTP: 429 quota-exceeded + Retry-After (until its oldest
// record expires). Retries of keys it already holds still replay.
var errQuotaExceeded = errors.New("idemkit/server: per-principal idempotency quota exceeded")

func (m *Middleware) quotasOn() bool {
	return m.cfg.MaxKeysPerPrincipal > 0 || m.cfg.MaxStoredBytesPerPrincipal > 0
}

// answeredByQuota enforces the per-principal quotas for a request whose
// scope has no live record: it answers (and reports true) when the scope
// has a record after all (a replay, 409 or 422, which quotas never block),
// when the principal is over a quota (429), or when the store fails.
func (m *Middleware) answeredByQuota(w http.ResponseWriter, r *http.Request, scope Scope, fp []byte, version int, ev *Event) bool {
	ctx, cancel := context.WithTimeout(r.Context(), m.cfg.StoreTimeout)
	defer cancel()
	now := m.now()
	rec, err := m.store.Get(ctx, scope, now)
	switch {
	case err == nil:
		m.answerExisting(w, r, rec, fp, version, ev)
		return true
	case !errors.Is(err, ErrRecordNotFound):
		m.storeFailure(w, r, ev, "get", err)
		return true
	}
	usage, err := m.usage.PrincipalUsage(ctx, scope.Principal, now)
	if err != nil {
		m.storeFailure(w, r, ev, "usage", err)
		return true
	}
	keysOver := m.cfg.MaxKeysPerPrincipal > 0 && usage.Keys >= m.cfg.MaxKeysPerPrincipal
	bytesOver := m.cfg.MaxStoredBytesPerPrincipal > 0 && usage.StoredBytes >= m.cfg.MaxStoredBytesPerPrincipal
	if !keysOver && !bytesOver {
		return false
	}
	retry := 1
	if !usage.OldestExpiresAt.IsZero() {
		retry = max(int(math.Ceil(min(usage.OldestExpiresAt.Sub(now), m.cfg.Window).Seconds())), 1)
	}
	ev.StoreErrors = append(ev.StoreErrors, "quota")
	ev.Outcome, ev.Status = OutcomeRejected, http.StatusTooManyRequests
	ev.Err = fmt.Errorf("%w: %d live keys, %d stored bytes", errQuotaExceeded, usage.Keys, usage.StoredBytes)
	writeProblem(w, http.StatusTooManyRequests, wire.ProblemQuotaExceeded,
		"This account holds as many idempotency keys or stored responses as the server keeps for it. Retries of keys already used still replay; new keys are accepted again after Retry-After.", retry)
	return true
}
