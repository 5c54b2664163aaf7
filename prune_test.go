package idemkit

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestClient_Prune(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	b := setup(t, cfg, nil)
	ctx := testkit.Ctx(t)
	done, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/a"})
	require.NoError(t, err)
	require.NoError(t, b.c.Cancel(ctx, done.ID))
	pending, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/b"})
	require.NoError(t, err)

	n, err := b.c.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 0, n, "too young")
	clock.Advance(2 * time.Hour)
	n, err = b.c.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = b.c.Get(ctx, done.ID)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = b.c.Get(ctx, pending.ID)
	require.NoError(t, err)
}

// TestPrune_ByStateKeepsReceipts: pruning failed intents keeps the
// succeeded ones (the receipts); a pending state is refused.
func TestPrune_ByStateKeepsReceipts(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // Prune(0) prunes what was updated before now: let a millisecond pass
	cfg := testConfig()
	cfg.timeNowFunc = clock.Now
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	ctx := testkit.Ctx(t)
	ok, err := b.c.Do(ctx, &Request{URL: b.srv.URL + "/ok"})
	require.NoError(t, err)
	_, err = b.c.Do(ctx, &Request{URL: b.srv.URL + "/bad"})
	require.ErrorIs(t, err, StateFailed)
	canceled, err := b.c.Submit(ctx, &Request{URL: b.srv.URL + "/later"})
	require.NoError(t, err)
	require.NoError(t, b.c.Cancel(ctx, canceled.ID))
	clock.Advance(time.Millisecond)

	_, err = b.c.Prune(ctx, 0, StatePending)
	require.ErrorIs(t, err, ErrInvalidRequest)
	n, err := b.c.Prune(ctx, 0, StateFailed, StateCanceled)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	counts, err := b.c.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StateSucceeded: 1}, counts)
	_, err = b.c.Get(ctx, ok.ID)
	require.NoError(t, err)
}
