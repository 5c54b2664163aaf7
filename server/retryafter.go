package server

import (
	"math"
	"net/http"
	"sync"
	"time"
)

// durationStatsMax bounds how many (principal, route) pairs the
// Retry-After estimate keeps statistics for.
const durationStatsMax = 1024

// durationEWMAWeight is the weight of the newest handler duration in the
// moving average.
const durationEWMAWeight = 0.2

// durations keeps, per principal and route, a moving average of how long
// the handler took, to tell a duplicate when the original is likely done.
// One principal's timing never steers (or shows) another's: beyond
// durationStatsMax pairs, an arbitrary one is dropped to make room, and a
// duplicate without history is estimated from the original's own age.
type durations struct {
	mu   sync.Mutex
	ewma map[string]time.Duration
}

// routeKey is the statistics key of r: the principal, the operation and the
// router's pattern when there is one (never the concrete path, which is
// unbounded).
func routeKey(r *http.Request, scope Scope) string {
	return scope.Principal + "\x00" + scope.Endpoint + " " + r.Method + " " + r.Pattern
}

func (d *durations) observe(key string, took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ewma == nil {
		d.ewma = make(map[string]time.Duration)
	}
	prev, ok := d.ewma[key]
	if !ok && len(d.ewma) >= durationStatsMax {
		for k := range d.ewma { // make room: drop an arbitrary pair
			delete(d.ewma, k)
			break
		}
	}
	if !ok {
		d.ewma[key] = took
		return
	}
	d.ewma[key] = ewmaStep(prev, took)
}

func ewmaStep(prev, took time.Duration) time.Duration {
	if prev == 0 {
		return took
	}
	return time.Duration(durationEWMAWeight*float64(took) + (1-durationEWMAWeight)*float64(prev))
}

// estimate returns the moving average for key, and false when there is no
// history.
func (d *durations) estimate(key string) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.ewma[key]
	return e, ok
}

// inFlightRetryAfter is the Retry-After, in whole seconds, for a duplicate
// of an in-progress record: when the original is likely done (its route's
// principal's recent handler duration on the route minus the time it has
// already run; without
// history, the time it has already run), at least 1 s and at most the time
// left on its lease.
func (m *Middleware) inFlightRetryAfter(r *http.Request, scope Scope, ex *Record) int {
	now := m.now()
	remaining := ex.LockedUntil.Sub(now)
	estimate, known := m.durations.estimate(routeKey(r, scope))
	var spent time.Duration
	if ex.Token == 1 && !ex.CreatedAt.IsZero() {
		spent = max(now.Sub(ex.CreatedAt), 0)
	}
	left := estimate - spent
	if !known {
		left = spent // no history: assume it runs about as long again
	}
	left = min(left, remaining)
	return max(int(math.Ceil(left.Seconds())), 1)
}
