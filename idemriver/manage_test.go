package idemriver_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
)

// An outcome unknown is reconciled by Resend: the same key again, and the
// server's replay settles it.
func TestClient_Resend(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		switch n {
		case 1: // the answer is lost
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
		case 2:
			w.WriteHeader(http.StatusUnauthorized)
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"pay_1"}`))
		}
	}))
	t.Cleanup(api.Close)
	b := setup(t, &idemriver.Config{Backoff: fixedBackoff(20 * time.Millisecond)})
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL})
	require.NoError(t, err)
	b.start(t)
	got, err := b.client.Wait(ctx, in.ID)
	require.ErrorIs(t, err, idemriver.StateUnknown)
	require.Equal(t, http.StatusUnauthorized, got.Outcome.Status)

	resent, err := b.client.Resend(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, idemriver.StatePending, resent.State)
	require.Nil(t, resent.Outcome, "the previous outcome is cleared")
	got, err = b.client.Wait(ctx, in.ID)
	require.NoError(t, err)
	require.True(t, got.Outcome.Replayed)
	require.Equal(t, 3, got.Attempts)
	mu.Lock()
	require.Equal(t, []string{in.Key, in.Key, in.Key}, keys)
	mu.Unlock()

	_, err = b.client.Resend(ctx, in.ID)
	require.ErrorIs(t, err, idemriver.ErrNotResendable, "a succeeded intent")
	_, err = b.client.Resend(ctx, "01890000-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, idemriver.ErrNotFound)
}

// Cancel ends a pending intent; it is never sent again.
func TestClient_Cancel(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hits := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(api.Close)
	b := setup(t, nil)
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL})
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(ctx, in.ID))
	got, err := b.client.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, idemriver.StateCanceled, got.State)
	b.start(t)
	require.ErrorIs(t, b.client.Cancel(ctx, in.ID), idemriver.ErrNotCancelable)
	_, err = b.client.Wait(ctx, in.ID)
	require.ErrorIs(t, err, idemriver.StateCanceled)
	require.ErrorIs(t, b.client.Cancel(ctx, "01890000-0000-7000-8000-000000000000"), idemriver.ErrNotFound)

	// A second intent, canceled while it waits out a Retry-After.
	in2, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		g, err := b.client.Get(ctx, in2.ID)
		return err == nil && g.Attempts == 1 && g.Outcome == nil && g.LastError != ""
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, b.client.Cancel(ctx, in2.ID))
	_, err = b.client.Wait(ctx, in2.ID)
	require.ErrorIs(t, err, idemriver.StateCanceled)
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, hits, 2, "the first intent was never sent; the second not after its cancel")
}
