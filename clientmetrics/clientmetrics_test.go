package clientmetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/clientmetrics"
)

// series returns every series of reg: a counter's or a gauge's value, or a
// histogram's number of observations.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(labels)
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetHistogram() != nil:
				out[name+" (observations)"] = float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			default:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// A real client against a server that answers 503 once, then 201: two
// attempts, one retry slept out, one intent succeeded with its time to
// outcome; a second intent only submitted is pending in the queue, whose
// file has a size.
func TestMetrics_RealClient(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)

	reg := prometheus.NewRegistry()
	met, err := clientmetrics.New(reg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	path := filepath.Join(t.TempDir(), "queue.db")
	c, err := idemkit.Open(ctx, path, &idemkit.Config{
		OnEventFunc: met.Observe,
		Backoff:     func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return time.Millisecond },
		HTTPClient:  srv.Client(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	q, err := clientmetrics.NewQueueCollector(c, path)
	require.NoError(t, err)
	require.NoError(t, reg.Register(q))

	in, err := c.Do(ctx, &idemkit.Request{Method: http.MethodPost, URL: srv.URL + "/charges", Body: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, idemkit.StateSucceeded, in.State)
	_, err = c.Submit(ctx, &idemkit.Request{Method: http.MethodPost, URL: srv.URL + "/later", Body: []byte(`{}`)})
	require.NoError(t, err)

	got := series(t, reg)
	for name, want := range map[string]float64{
		"idemkit_client_attempts_total":                         2,
		"idemkit_client_answers_total{class=5xx}":               1,
		"idemkit_client_answers_total{class=2xx}":               1,
		"idemkit_client_answers_total{class=4xx}":               0,
		"idemkit_client_replays_total":                          0,
		"idemkit_client_retries_total{queued=false}":            1,
		"idemkit_client_retries_total{queued=true}":             0,
		"idemkit_client_retry_wait_seconds (observations)":      1,
		"idemkit_client_intents_ended_total{state=succeeded}":   1,
		"idemkit_client_intents_ended_total{state=expired}":     0,
		"idemkit_client_time_to_outcome_seconds (observations)": 1,
		"idemkit_client_intents{state=succeeded}":               1,
		"idemkit_client_intents{state=pending}":                 1,
		"idemkit_client_intents{state=failed}":                  0,
		"idemkit_client_queue_up":                               1,
	} {
		require.Contains(t, got, name)
		require.InDelta(t, want, got[name], 0, name)
	}
	require.Positive(t, got["idemkit_client_queue_file_bytes"])

	_, err = clientmetrics.New(reg)
	require.Error(t, err, "one Metrics per Registerer")
	_, err = clientmetrics.New(nil)
	require.ErrorContains(t, err, "reg is nil")
}
