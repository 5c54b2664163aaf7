package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A duplicate of a request on a route that usually takes milliseconds is
// told to come back in about a second, not after the whole remaining lease:
// generic clients with a 20 s timeout would otherwise give up on a payment
// that succeeded.
func TestRetryAfter_EstimatesFromRecentDurations(t *testing.T) {
	t.Parallel()
	for _, kind := range mwStoreKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := mwNewStore(t, kind)
			entered := make(chan struct{})
			release := make(chan struct{})
			rig := newLeaseRig(t, s.store, func(c *Config) { c.LeaseDuration = 30 * time.Second }, func(run int64, w http.ResponseWriter, r *http.Request) {
				if run == 2 {
					close(entered)
					<-release
				}
				charged(run, w)
			})
			require.Equal(t, http.StatusCreated, rig.post(t, "fast-1").Status)

			done := make(chan *mwResponse, 1)
			go func() { done <- rig.post(t, "slow-1") }()
			<-entered
			dup := rig.post(t, "slow-1")
			dup.requireProblem(t, http.StatusConflict, ProblemInFlight)
			require.Equal(t, "1", dup.Header.Get("Retry-After"), "the route takes milliseconds; the lease has 30 s left")
			close(release)
			require.Equal(t, http.StatusCreated, (<-done).Status)
		})
	}
}

func TestRetryAfter_BoundedByLease(t *testing.T) {
	t.Parallel()
	m := &Middleware{timeNowFunc: time.Now}
	now := time.Now()
	r, _ := http.NewRequest(http.MethodPost, "/x", nil)
	sc := Scope{Principal: "p", Endpoint: EndpointAny, Key: "k"}
	m.durations.observe(routeKey(r, sc), time.Minute)
	rec := &Record{Token: 1, CreatedAt: now.Add(-10 * time.Second), LockedUntil: now.Add(5 * time.Second)}
	require.Equal(t, 5, m.inFlightRetryAfter(r, sc, rec), "never past the lease")
	rec.LockedUntil = now.Add(time.Hour)
	require.InDelta(t, 50, m.inFlightRetryAfter(r, sc, rec), 1, "the estimate minus the time already spent")
	rec.CreatedAt = now.Add(-2 * time.Minute)
	require.Equal(t, 1, m.inFlightRetryAfter(r, sc, rec), "at least 1 s")
}
