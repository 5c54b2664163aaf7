package paymentsapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
)

// waitingGauge reads idemkit_server_waiting from reg.
func waitingGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "idemkit_server_waiting" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("idemkit_server_waiting is not exported")
	return 0
}

// With WaitInFlight (--wait), a retry of a payment still in flight waits
// for it and gets its response (the same payment) instead of 409; the
// waiting gauge shows it while it waits.
func TestPayments_WaitGetsTheInFlightPaymentsResponse(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		reg := prometheus.NewRegistry()
		cfg.Metrics = reg
		cfg.WaitInFlight = 30 * time.Second
		started, release := make(chan struct{}, 1), make(chan struct{})
		b := setup(t, cfg, func(h *handlers) {
			h.onChargeStart = func(string, string) {
				select {
				case started <- struct{}{}: // the first payment only: held until release
					<-release
				default:
				}
			}
		})
		results := make(chan response, 2)
		go func() { results <- b.pay(t, "alice", "key-1", usd40) }()
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the first payment never started")
		}
		go func() { results <- b.pay(t, "alice", "key-1", usd40) }()
		require.Eventually(t, func() bool { return waitingGauge(t, reg) == 1 }, 20*time.Second, 5*time.Millisecond)
		close(release)

		a, c := <-results, <-results
		require.Equal(t, http.StatusCreated, a.status, "body: %s", a.body)
		require.Equal(t, http.StatusCreated, c.status, "the retry waited instead of a 409: %s", c.body)
		require.Equal(t, string(a.body), string(c.body), "the same payment")
		require.ElementsMatch(t, []string{"", "true"}, []string{a.header.Get(wire.HeaderReplayed), c.header.Get(wire.HeaderReplayed)})
		require.Len(t, b.list(t, "alice"), 1)
		require.Zero(t, waitingGauge(t, reg))
	})
}

// A revoked account's retry is refused 403 replay-forbidden, never its
// stored receipt; other accounts replay as before.
func TestPayments_RevokedAccountsReplayIsForbidden(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		cfg.RevokedAccounts = []string{"mallory"}
		b := setup(t, cfg, nil)
		require.Equal(t, http.StatusCreated, b.pay(t, "mallory", "key-1", usd40).status)
		resp := b.pay(t, "mallory", "key-1", usd40)
		requireProblem(t, resp, http.StatusForbidden, wire.ProblemReplayForbidden)
		require.NotContains(t, string(resp.body), "groceries")

		require.Equal(t, http.StatusCreated, b.pay(t, "alice", "key-1", usd40).status)
		again := b.pay(t, "alice", "key-1", usd40)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
	})
}
