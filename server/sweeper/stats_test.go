package sweeper

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
)

// Stats counts the sweeps, the rows they deleted and the time of the last
// success; a failing store counts failures and leaves LastSuccess alone.
func TestSweeper_Stats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := swSQLiteStore(t)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		_, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprint("expired-", i)},
			Fingerprint: []byte{1}, FingerprintVersion: 1,
			Now: t0, ExpiresAt: t0.Add(time.Minute), LockedUntil: t0.Add(time.Second),
		})
		require.NoError(t, err)
	}
	now := t0.Add(time.Hour)
	sw := start(store, &Config{Interval: time.Hour, Grace: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)},
		func() time.Time { return now })
	t.Cleanup(func() { _ = sw.Close() })
	swEventually(t, "the first sweep to end", func() bool { return sw.Stats().Runs == 1 })
	st := sw.Stats()
	require.Equal(t, Stats{Runs: 1, Deleted: 3, LastSuccess: now, Interval: time.Hour, Grace: 2 * time.Second}, st)

	broken := swSQLiteStore(t)
	require.NoError(t, broken.DB().Close())
	bsw := start(broken, &Config{Interval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
		func() time.Time { return now })
	t.Cleanup(func() { _ = bsw.Close() })
	swEventually(t, "two failed sweeps", func() bool { return bsw.Stats().Failures >= 2 })
	require.NoError(t, bsw.Close())
	bst := bsw.Stats()
	require.Equal(t, bst.Runs, bst.Failures)
	require.True(t, bst.LastSuccess.IsZero())
}
