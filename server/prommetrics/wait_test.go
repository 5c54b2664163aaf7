package prommetrics_test

import (
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
)

type fakeWaiter struct{ n atomic.Int64 }

func (f *fakeWaiter) Waiting() int { return int(f.n.Load()) }

// The gauge reads the middleware's count of waiting requests at every
// scrape, under the store label.
func TestWaitingGauge_ReadsAtScrape(t *testing.T) {
	t.Parallel()
	w := &fakeWaiter{}
	g, err := prommetrics.NewWaitingGauge(w, &prommetrics.Config{Store: "postgres"})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(g))
	scrape := func() float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		require.Len(t, mfs, 1)
		require.Equal(t, "idemkit_server_waiting", mfs[0].GetName())
		m := mfs[0].GetMetric()[0]
		require.Equal(t, "store", m.GetLabel()[0].GetName())
		require.Equal(t, "postgres", m.GetLabel()[0].GetValue())
		return m.GetGauge().GetValue()
	}
	require.InDelta(t, 0, scrape(), 0)
	w.n.Store(3)
	require.InDelta(t, 3, scrape(), 0)
	_, err = prommetrics.NewWaitingGauge(nil, nil)
	require.Error(t, err)
}

// A refused replay is an outcome of its own, exported at zero from the
// start and counted once per refusal.
func TestMetrics_ReplayRefusedOutcome(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	met, err := prommetrics.New(reg)
	require.NoError(t, err)
	refused := func() (float64, bool) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "idemkit_server_requests_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == string(server.OutcomeReplayRefused) {
						return m.GetCounter().GetValue(), true
					}
				}
			}
		}
		return 0, false
	}
	v, ok := refused()
	require.True(t, ok, "the series exists before any refusal")
	require.Zero(t, v)
	met.Observe(nil, server.Event{Outcome: server.OutcomeReplayRefused, Status: 403})
	v, _ = refused()
	require.InDelta(t, 1, v, 0)
}
