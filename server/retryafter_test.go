package server

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter_BoundedByLease(t *testing.T) {
	t.Parallel()
	m := &Middleware{timeNowFunc: time.Now}
	now := time.Now()
	r, _ := http.NewRequest(http.MethodPost, "/x", nil)
	sc := Scope{Principal: "p", Endpoint: endpointAny, Key: "k"}
	m.durations.observe(routeKey(r, sc), time.Minute)
	m.durations.observe(routeKey(r, Scope{Principal: "other", Endpoint: endpointAny, Key: "k"}), time.Hour)
	rec := &Record{Token: 1, CreatedAt: now.Add(-10 * time.Second), LockedUntil: now.Add(5 * time.Second)}
	require.Equal(t, 5, m.inFlightRetryAfter(r, sc, rec), "never past the lease")
	rec.LockedUntil = now.Add(time.Hour)
	require.InDelta(t, 50, m.inFlightRetryAfter(r, sc, rec), 1, "the estimate minus the time already spent")
	rec.CreatedAt = now.Add(-2 * time.Minute)
	require.Equal(t, 1, m.inFlightRetryAfter(r, sc, rec), "at least 1 s")
}
