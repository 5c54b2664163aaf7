package idemkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestDo_BadCertificateGivesUp: a server whose certificate the client does
// not trust gets one attempt; the intent ends failed with the TLS error.
func TestDo_BadCertificateGivesUp(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	b := setup(t, nil, nil)
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: srv.URL})
	require.ErrorIs(t, err, StateFailed)
	require.Equal(t, 1, in.Attempts, "never retried")
	require.Contains(t, in.LastError, "gave up")
	require.Contains(t, in.LastError, "certificate")
	require.Zero(t, n.Load(), "the handler never ran")
}

// TestRetryAfter_ZeroDoesNotHotLoop: a server that answers Retry-After: 0
// forever gets a growing wait (floor plus backoff), not ten attempts a
// second: the measured bug was 89 attempts in 9 s.
func TestRetryAfter_ZeroDoesNotHotLoop(t *testing.T) {
	t.Parallel()
	s := newScripted(t, "Idempotency-Key", answer(http.StatusServiceUnavailable, "", "Retry-After", "0"))
	cfg := testConfig()
	cfg.Backoff = nil // defaultBackoff
	b := setup(t, cfg, nil)
	in, err := b.c.Do(shortCtx(t, 1500*time.Millisecond), &Request{URL: s.srv.URL})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, StatePending, in.State)
	require.LessOrEqual(t, int(s.n.Load()), 8, "attempts in 1.5 s")
}
