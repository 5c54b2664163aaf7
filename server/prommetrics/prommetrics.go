// Package prommetrics exports the idempotency middleware's Prometheus
// metrics, built on its event hook (server.Config.OnEventFunc), so that a
// server that does not use Prometheus links none of it.
//
//	metrics, err := prommetrics.New(prometheus.DefaultRegisterer)
//	m, err := server.New(store, &server.Config{
//		PrincipalFunc: principal,
//		OnEventFunc:   metrics.Observe,
//	})
//
// The metrics, all with namespace idemkit and subsystem server:
//
//	idemkit_server_requests_total{outcome}   keyed requests by server.Outcome
//	idemkit_server_claims_total              claims acquired (the handler ran)
//	idemkit_server_replays_total             stored responses replayed
//	idemkit_server_conflicts_total           409 in-flight answers
//	idemkit_server_mismatches_total          422 key-reused answers
//	idemkit_server_releases_total            claims released (or rolled back) after a 5xx, a panic or a response not stored
//	idemkit_server_takeovers_total           lapsed leases taken over
//	idemkit_server_lease_lost_total          completions, releases or extensions refused because the lease was lost
//	idemkit_server_store_errors_total{op}    store errors by operation (see server.Event.StoreErrors)
//	idemkit_server_claim_duration_seconds    latency of the claim call (histogram)
//	idemkit_server_quota_rejections_total    new keys refused 429 by a per-principal quota
//	idemkit_server_responses_not_captured_total  handlers that wrote around the middleware (response-not-captured)
//	idemkit_server_wait_refused_total        duplicates answered 409 at once because every waiting place was taken (server.Event.WaitRefused)
//
// Each has the label store (Config.Store, "default" with New), so that the
// metrics of several middlewares, one per store, can share a Registerer.
// The vectors start with every known label value at zero, so that a rule
// or a panel finds every series from the first scrape.
//
// NewStoreCollector exports the health of the store itself: rows by state,
// stuck claims, sizes, the age of the oldest record and of the oldest
// expired one, the connection pool and the sweeper (see StoreCollector):
//
//	sw := sweeper.Start(store, nil)
//	c, err := prommetrics.NewStoreCollector(store, &prommetrics.StoreCollectorConfig{Sweeper: sw, Window: window})
//	err = prometheus.DefaultRegisterer.Register(c)
//
// NewWaitingGauge exports the requests waiting for their in-flight
// original (server.Config.WaitInFlight) and their bound.
//
// NewRecovererCollector exports what a server/recoverer did with the
// lapsed claims of dead holders (see RecovererCollector).
//
// docs/prometheus/alerts.yml and docs/grafana/idemkit.json are alert rules
// and a dashboard over these metrics; docs/runbook.md says what to do when
// an alert fires.
package prommetrics

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idemkit/server"
)

// Metrics are the collectors of one middleware. Observe is its
// server.Config.OnEventFunc.
type Metrics struct {
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
	quota       prometheus.Counter
	notCaptured prometheus.Counter
	waitRefused prometheus.Counter
}

// Config configures the Metrics of NewWithConfig. The zero value is valid.
type Config struct {
	// Store is the value of the label store on every metric: a name for the
	// store the middleware uses, the same as the StoreCollectorConfig.Store
	// of its NewStoreCollector. Defaults to "default".
	Store string
}

// storeLabelDefault is the default Config.Store.
const storeLabelDefault = "default"

// outcomes are the values of the label outcome, every server.Outcome.
var outcomes = []server.Outcome{server.OutcomeExecuted, server.OutcomeReplayed, server.OutcomeConflict,
	server.OutcomeMismatch, server.OutcomeRejected, server.OutcomeReleased, server.OutcomeStoreError,
	server.OutcomeUnknown, server.OutcomeCanceled, server.OutcomeReplayRefused}

// storeOps are the values of the label op, every operation of
// server.Event.StoreErrors.
var storeOps = []string{"claim", "begin", "get", "get_legacy", "usage", "quota", "complete", "commit", "release", "extend_lease"}

// New returns the collectors, registered on reg, with the label
// store="default". It fails if reg already has them: one Metrics (and one
// middleware) per Registerer and store name.
func New(reg prometheus.Registerer) (*Metrics, error) {
	return NewWithConfig(reg, nil)
}

// NewWithConfig is New with a Config; cfg may be nil. It fails if reg
// already has the collectors of a Metrics with the same Config.Store.
func NewWithConfig(reg prometheus.Registerer, cfg *Config) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("idemkit/server/prommetrics: New: reg is nil")
	}
	store := storeLabelDefault
	if cfg != nil && cfg.Store != "" {
		store = cfg.Store
	}
	labels := prometheus.Labels{"store": store}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemkit", Subsystem: "server", Name: name, Help: help,
			ConstLabels: labels})
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idemkit", Subsystem: "server", Name: "requests_total",
			Help: "Keyed requests by outcome.", ConstLabels: labels,
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
			Help: "Store errors by operation (op=\"quota\" counts refusals by quota).", ConstLabels: labels,
		}, []string{"op"}),
		claimTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "idemkit", Subsystem: "server", Name: "claim_duration_seconds",
			Help:    "Latency of the claim statement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), ConstLabels: labels,
		}),
		quota: counter("quota_rejections_total", "New keys refused 429 because the principal is over a per-principal quota."),
		notCaptured: counter("responses_not_captured_total",
			"Handlers that returned without writing through the middleware's ResponseWriter: the record was completed as response-not-captured."),
		waitRefused: counter("wait_refused_total",
			"Duplicates of an in-flight request answered 409 at once because Config.MaxWaiting or Config.MaxWaitingPerPrincipal was reached."),
	}
	for _, o := range outcomes {
		m.requests.WithLabelValues(string(o))
	}
	for _, op := range storeOps {
		m.storeErrors.WithLabelValues(op)
	}
	for _, c := range []prometheus.Collector{m.requests, m.claims, m.replays, m.conflicts, m.mismatches,
		m.releases, m.takeovers, m.leaseLost, m.storeErrors, m.claimTime, m.quota, m.notCaptured, m.waitRefused} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("idemkit/server/prommetrics: metrics already registered (one middleware per Registerer): %w", err)
			}
			return nil, fmt.Errorf("idemkit/server/prommetrics: %w", err)
		}
	}
	return m, nil
}

// Observe counts one request's event. Use it as server.Config.OnEventFunc,
// or call it from yours.
func (m *Metrics) Observe(_ *http.Request, e server.Event) {
	m.requests.WithLabelValues(string(e.Outcome)).Inc()
	if e.ClaimDuration > 0 {
		m.claimTime.Observe(e.ClaimDuration.Seconds())
	}
	if e.Token != 0 {
		m.claims.Inc()
	}
	if e.TakenOver {
		m.takeovers.Inc()
	}
	switch e.Outcome {
	case server.OutcomeReplayed:
		m.replays.Inc()
	case server.OutcomeConflict:
		m.conflicts.Inc()
	case server.OutcomeMismatch:
		m.mismatches.Inc()
	}
	if e.Released {
		m.releases.Inc()
	}
	if e.LeaseLost > 0 {
		m.leaseLost.Add(float64(e.LeaseLost))
	}
	if e.ResponseNotCaptured {
		m.notCaptured.Inc()
	}
	if e.WaitRefused {
		m.waitRefused.Inc()
	}
	for _, op := range e.StoreErrors {
		m.storeErrors.WithLabelValues(op).Inc()
		if op == "quota" {
			m.quota.Inc()
		}
	}
}
