package server

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the middleware's Prometheus collectors. Without a Registerer
// they are still updated but never exported.
//
//	idemkit_server_requests_total{outcome}       keyed requests by Outcome
//	idemkit_server_claims_total                  claims acquired (handler ran)
//	idemkit_server_replays_total                 stored responses replayed
//	idemkit_server_conflicts_total               409 in-flight answers
//	idemkit_server_mismatches_total              422 key-reused answers
//	idemkit_server_releases_total                claims released after a 5xx or panic
//	idemkit_server_takeovers_total               lapsed leases taken over
//	idemkit_server_lease_lost_total              completions refused (ErrLeaseLost)
//	idemkit_server_store_errors_total{op}        store errors by operation
//	idemkit_server_claim_duration_seconds        latency of the claim statement
type metrics struct {
	requests    *prometheus.CounterVec
	claims      prometheus.Counter
	replays     prometheus.Counter
	conflicts   prometheus.Counter
	mismatches  prometheus.Counter
	releases    prometheus.Counter
	takeovers   prometheus.Counter
	leaseLost   prometheus.Counter
	storeErrors *prometheus.CounterVec
	claimTime   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemkit", Subsystem: "server", Name: name, Help: help})
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idemkit", Subsystem: "server", Name: "requests_total",
			Help: "Keyed requests by outcome.",
		}, []string{"outcome"}),
		claims:     counter("claims_total", "Claims acquired: the handler ran."),
		replays:    counter("replays_total", "Stored responses replayed."),
		conflicts:  counter("conflicts_total", "Requests answered 409 because the key was in flight."),
		mismatches: counter("mismatches_total", "Requests answered 422 because the key was used with a different request."),
		releases:   counter("releases_total", "Claims released (or rolled back) after a 5xx or a panic."),
		takeovers:  counter("takeovers_total", "Lapsed leases taken over by a retry."),
		leaseLost:  counter("lease_lost_total", "Completions, releases or extensions refused because the lease was lost."),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idemkit", Subsystem: "server", Name: "store_errors_total",
			Help: "Store errors by operation.",
		}, []string{"op"}),
		claimTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "idemkit", Subsystem: "server", Name: "claim_duration_seconds",
			Help:    "Latency of the claim statement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.claims, m.replays, m.conflicts, m.mismatches,
		m.releases, m.takeovers, m.leaseLost, m.storeErrors, m.claimTime} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("idemkit/server: Config.Registerer: metrics already registered (one Middleware per Registerer): %w", err)
			}
			return nil, fmt.Errorf("idemkit/server: Config.Registerer: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) outcome(o Outcome) { m.requests.WithLabelValues(string(o)).Inc() }

func (m *metrics) storeError(op string) { m.storeErrors.WithLabelValues(op).Inc() }
