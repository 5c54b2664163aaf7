package prommetrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
)

// Each event is counted once per metric it concerns: the claims by their
// token, the takeovers, replays, conflicts and mismatches by the outcome,
// the releases, lost leases and failed store operations by the event's
// fields, and the claim latency when a claim was made.
func TestMetrics_Observe(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	met, err := prommetrics.New(reg)
	require.NoError(t, err)
	ms := time.Millisecond
	for _, e := range []server.Event{
		{Outcome: server.OutcomeExecuted, Status: 201, Token: 1, ClaimDuration: ms},
		{Outcome: server.OutcomeExecuted, Status: 201, Token: 2, TakenOver: true, ClaimDuration: ms},
		{Outcome: server.OutcomeReplayed, Status: 201, ClaimDuration: ms},
		{Outcome: server.OutcomeConflict, Status: 409, ClaimDuration: ms},
		{Outcome: server.OutcomeMismatch, Status: 422, ClaimDuration: ms},
		{Outcome: server.OutcomeReleased, Status: 502, Token: 1, Released: true, LeaseLost: 1, ClaimDuration: ms},
		{Outcome: server.OutcomeRejected, Status: 400},
		{Outcome: server.OutcomeStoreError, Status: 503, StoreErrors: []string{"claim"}, ClaimDuration: ms},
		{Outcome: server.OutcomeExecuted, Status: 201, Token: 1, StoreErrors: []string{"extend_lease", "extend_lease", "complete"}},
		{Outcome: server.OutcomeRejected, Status: 429, StoreErrors: []string{"quota"}},
		{Outcome: server.OutcomeExecuted, Status: 500, Token: 1, ResponseNotCaptured: true},
	} {
		met.Observe(nil, e)
	}
	require.Equal(t, map[string]float64{
		"idemkit_server_claims_total":                          5,
		"idemkit_server_responses_not_captured_total":          1,
		"idemkit_server_conflicts_total":                       1,
		"idemkit_server_lease_lost_total":                      1,
		"idemkit_server_mismatches_total":                      1,
		"idemkit_server_releases_total":                        1,
		"idemkit_server_replays_total":                         1,
		"idemkit_server_takeovers_total":                       1,
		`idemkit_server_requests_total{outcome="conflict"}`:    1,
		`idemkit_server_requests_total{outcome="executed"}`:    4,
		`idemkit_server_requests_total{outcome="mismatch"}`:    1,
		`idemkit_server_requests_total{outcome="rejected"}`:    2,
		`idemkit_server_requests_total{outcome="released"}`:    1,
		`idemkit_server_requests_total{outcome="replayed"}`:    1,
		`idemkit_server_requests_total{outcome="store_error"}`: 1,
		`idemkit_server_store_errors_total{op="claim"}`:        1,
		`idemkit_server_store_errors_total{op="complete"}`:     1,
		`idemkit_server_store_errors_total{op="extend_lease"}`: 2,
		`idemkit_server_store_errors_total{op="quota"}`:        1,
		"idemkit_server_quota_rejections_total":                1,
		"idemkit_server_claim_duration_seconds (observations)": 7,
	}, gather(t, reg))
}

// gather returns every series of reg that is not zero: a counter's value,
// or a histogram's number of observations. The label store, the same on
// every series, is left out.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			var labels []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "store" {
					continue
				}
				labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			if h := m.GetHistogram(); h != nil {
				out[name+" (observations)"] = float64(h.GetSampleCount())
				continue
			}
			if v := m.GetCounter().GetValue(); v != 0 {
				out[name] = v
			}
		}
	}
	return out
}

func TestNew_OncePerRegisterer(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := prommetrics.New(reg)
	require.NoError(t, err)
	_, err = prommetrics.New(reg)
	require.ErrorContains(t, err, "already registered")
	_, err = prommetrics.New(nil)
	require.ErrorContains(t, err, "reg is nil")
}

// Two middlewares, one per store, share a Registerer under two store
// labels, and every vector starts with each known label value at zero.
func TestNewWithConfig_StoreLabelAndInitialisedVectors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	pg, err := prommetrics.NewWithConfig(reg, &prommetrics.Config{Store: "pg"})
	require.NoError(t, err)
	_, err = prommetrics.NewWithConfig(reg, &prommetrics.Config{Store: "sqlite"})
	require.NoError(t, err)
	_, err = prommetrics.NewWithConfig(reg, &prommetrics.Config{Store: "pg"})
	require.ErrorContains(t, err, "already registered")
	pg.Observe(nil, server.Event{Outcome: server.OutcomeExecuted, Token: 1})

	mfs, err := reg.Gather()
	require.NoError(t, err)
	series := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			series[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	require.InDelta(t, 1, series["idemkit_server_requests_total{outcome=executed,store=pg}"], 0)
	for _, store := range []string{"pg", "sqlite"} {
		for _, o := range []string{"executed", "replayed", "conflict", "mismatch", "rejected", "released", "store_error", "unknown", "canceled"} {
			require.Contains(t, series, "idemkit_server_requests_total{outcome="+o+",store="+store+"}")
		}
		for _, op := range []string{"claim", "begin", "get", "get_legacy", "usage", "quota", "complete", "commit", "release", "extend_lease"} {
			require.Contains(t, series, "idemkit_server_store_errors_total{op="+op+",store="+store+"}")
		}
	}
}
