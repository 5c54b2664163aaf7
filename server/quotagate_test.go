package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A quota check waiting behind another request of the same principal gives
// up when its context ends (the store call it waits behind may hang), and
// the gates of principals nobody holds are forgotten.
func TestQuotaGates_WaitEndsWithContext(t *testing.T) {
	t.Parallel()
	var q quotaGates
	g, err := q.lock(context.Background(), "p")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = q.lock(ctx, "p")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	g.pending++
	q.unlock("p", g)
	require.Len(t, q.gates, 1, "a gate counting a reservation is kept")
	g, err = q.lock(context.Background(), "p")
	require.NoError(t, err)
	g.pending--
	q.unlock("p", g)
	require.Empty(t, q.gates)
}
