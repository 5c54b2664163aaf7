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

type fakeLimitedWaiter struct{ fakeWaiter }

func (*fakeLimitedWaiter) MaxWaiting() int { return 256 }

// *server.Middleware reports its bound, so that NewWaitingGauge exports
// idemkit_server_max_waiting for it.
var _ interface{ MaxWaiting() int } = (*server.Middleware)(nil)

// A Waiter that reports its bound gets idemkit_server_max_waiting beside
// idemkit_server_waiting, both under the store label, from the first
// scrape.
func TestWaitingGauge_ExportsTheBound(t *testing.T) {
	t.Parallel()
	w := &fakeLimitedWaiter{}
	g, err := prommetrics.NewWaitingGauge(w, &prommetrics.Config{Store: "sqlite"})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(g))
	w.n.Store(2)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		require.Equal(t, "sqlite", m.GetLabel()[0].GetValue(), mf.GetName())
		got[mf.GetName()] = m.GetGauge().GetValue()
	}
	require.Equal(t, map[string]float64{"idemkit_server_waiting": 2, "idemkit_server_max_waiting": 256}, got)
}

// A duplicate refused a waiting place is counted in
// idemkit_server_wait_refused_total, exported at zero from the start.
func TestMetrics_WaitRefused(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	met, err := prommetrics.New(reg)
	require.NoError(t, err)
	refused := func() (float64, bool) {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "idemkit_server_wait_refused_total" {
				return mf.GetMetric()[0].GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	v, ok := refused()
	require.True(t, ok, "the series exists before any refusal")
	require.Zero(t, v)
	met.Observe(nil, server.Event{Outcome: server.OutcomeConflict, Status: 409})
	v, _ = refused()
	require.Zero(t, v, "a 409 after waiting, or without waiting on, is no refusal")
	met.Observe(nil, server.Event{Outcome: server.OutcomeConflict, Status: 409, WaitRefused: true})
	v, _ = refused()
	require.InDelta(t, 1, v, 0)
}
