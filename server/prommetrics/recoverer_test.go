package prommetrics_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
	"github.com/idemkit/idemkit/server/recoverer"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// The recoverer collector exports every outcome from zero, then counts
// what the passes did: one claim completed, one released.
func TestRecovererCollector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	r, err := recoverer.New(store, func(_ context.Context, c recoverer.Claim) (*server.StoredResponse, error) {
		if c.Scope.Key == "made" {
			return &server.StoredResponse{Status: 201, Body: []byte("{}")}, nil
		}
		return nil, nil
	}, &recoverer.Config{MinAge: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	c, err := prommetrics.NewRecovererCollector(r, &prommetrics.RecovererCollectorConfig{Store: "sqlite"})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))

	got := series(t, reg, "sqlite")
	for _, o := range []string{"completed", "released", "failed", "skipped"} {
		v, ok := got["idemkit_recoverer_claims_total{outcome="+o+"}"]
		require.True(t, ok, "outcome %s starts at zero", o)
		require.Zero(t, v)
	}
	require.Equal(t, 30.0, got["idemkit_recoverer_interval_seconds"])
	require.Zero(t, got["idemkit_recoverer_last_success_timestamp_seconds"])
	givenUp, ok := got["idemkit_recoverer_given_up_claims"]
	require.True(t, ok, "the given-up gauge is exported from the start")
	require.Zero(t, givenUp)

	// Two claims whose holders died: their 50ms leases lapse.
	now := time.Now()
	for _, key := range []string{"made", "never"} {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "*", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
			ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(50 * time.Millisecond),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
	}
	require.Eventually(t, func() bool {
		require.NoError(t, r.Pass(ctx))
		st := r.Stats()
		return st.Outcomes[recoverer.OutcomeCompleted] == 1 && st.Outcomes[recoverer.OutcomeReleased] == 1
	}, 30*time.Second, 20*time.Millisecond)

	got = series(t, reg, "sqlite")
	require.Equal(t, 1.0, got["idemkit_recoverer_claims_total{outcome=completed}"])
	require.Equal(t, 1.0, got["idemkit_recoverer_claims_total{outcome=released}"])
	require.Positive(t, got["idemkit_recoverer_passes_total"])
	require.Zero(t, got["idemkit_recoverer_pass_failures_total"])
	require.Positive(t, got["idemkit_recoverer_last_success_timestamp_seconds"])

	_, err = prommetrics.NewRecovererCollector(nil, nil)
	require.Error(t, err)
}
