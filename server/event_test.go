package server

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// eventOf is the one place an Event is built: the answer's fields and the
// trace's, and the answer's failed store call after the trace's.
func TestEventOf(t *testing.T) {
	t.Parallel()
	scope := Scope{Principal: "alice", Endpoint: "*", Key: "k"}
	boom := errors.New("boom")
	tr := &trace{
		scope: scope, requestID: "req-1",
		token: 7, takenOver: true, claimDuration: time.Millisecond,
		released: true, leaseLost: 2, waited: time.Second, waitRefused: true,
	}
	tr.storeError("extend_lease")
	tr.storeError("release")
	a := answer{outcome: OutcomeStoreError, status: http.StatusServiceUnavailable, err: boom, storeErr: "quota",
		originalRequestID: "req-0", responseNotCaptured: true}
	require.Equal(t, Event{
		Scope: scope, Outcome: OutcomeStoreError, Status: http.StatusServiceUnavailable,
		Token: 7, TakenOver: true, Err: boom, Duration: 3 * time.Second, ClaimDuration: time.Millisecond,
		Released: true, LeaseLost: 2, ResponseNotCaptured: true,
		StoreErrors: []string{"extend_lease", "release", "quota"},
		Waited:      time.Second, WaitRefused: true, RequestID: "req-1", OriginalRequestID: "req-0",
	}, eventOf(tr, a, 3*time.Second))

	// A request rejected before its scope was known: only the answer and
	// the correlation id; no store errors at all (nil, not empty).
	ev := eventOf(&trace{requestID: "req-2"}, answer{outcome: OutcomeRejected, status: http.StatusBadRequest}, 0)
	require.Equal(t, Event{Outcome: OutcomeRejected, Status: http.StatusBadRequest, RequestID: "req-2"}, ev)
	require.Nil(t, ev.StoreErrors)
}
