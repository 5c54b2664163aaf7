package prommetrics

import (
	"cmp"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idemkit/server/recoverer"
)

// RecovererCollectorConfig configures a RecovererCollector. The zero value
// is valid.
type RecovererCollectorConfig struct {
	// Store is the value of the label store on every metric; use the same
	// as the store's StoreCollectorConfig.Store. Defaults to "default".
	Store string
}

// RecovererCollector is a prometheus.Collector over a recoverer's Stats
// (package server/recoverer): register it on the Registerer of your
// choice. A scrape reads counters in memory; it never calls the store.
//
// The metrics, all with the label store:
//
//	idemkit_recoverer_claims_total{outcome}          claims a pass looked at, by recoverer.Outcome: completed, released, failed, skipped
//	idemkit_recoverer_passes_total                   passes ended
//	idemkit_recoverer_pass_failures_total            passes whose listing of the in-flight claims failed
//	idemkit_recoverer_last_success_timestamp_seconds end of the last successful pass (Unix time; 0 before the first)
//	idemkit_recoverer_interval_seconds               the recoverer's interval
//	idemkit_recoverer_given_up_claims                claims given up on (MaxAttempts takeovers without a decision), still in flight
//
// Every outcome starts at zero, so that a rule finds each series from the
// first scrape. A failed count that grows means recoveries that cannot
// decide (the downstream is unreachable, or the RecoverFunc errs): see
// docs/runbook.md.
type RecovererCollector struct {
	r     *recoverer.Recoverer
	descs struct {
		claims, passes, passFailures, lastSuccess, interval, givenUp *prometheus.Desc
	}
}

// NewRecovererCollector returns a collector of r's Stats; cfg may be nil.
// Register it: reg.Register(c). It fails if r is nil.
func NewRecovererCollector(r *recoverer.Recoverer, cfg *RecovererCollectorConfig) (*RecovererCollector, error) {
	if r == nil {
		return nil, errors.New("idemkit/server/prommetrics: NewRecovererCollector: recoverer is nil")
	}
	var c RecovererCollectorConfig
	if cfg != nil {
		c = *cfg
	}
	labels := prometheus.Labels{"store": cmp.Or(c.Store, storeLabelDefault)}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("idemkit", "recoverer", name), help, variable, labels)
	}
	rc := &RecovererCollector{r: r}
	rc.descs.claims = desc("claims_total", "Lapsed lease-mode claims a recoverer pass looked at, by outcome: completed, released, failed, skipped.", "outcome")
	rc.descs.passes = desc("passes_total", "Recoverer passes that ended.")
	rc.descs.passFailures = desc("pass_failures_total", "Recoverer passes whose listing of the in-flight claims failed.")
	rc.descs.lastSuccess = desc("last_success_timestamp_seconds", "End of the last successful recoverer pass, in Unix time (0 before the first).")
	rc.descs.interval = desc("interval_seconds", "Interval between two recoverer passes.")
	rc.descs.givenUp = desc("given_up_claims", "Claims the recoverer gave up on (MaxAttempts takeovers without a decision) still in flight at its last successful pass: in progress until a retry or their expiry, their external effect undecided.")
	return rc, nil
}

// Describe implements prometheus.Collector.
func (c *RecovererCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, x := range []*prometheus.Desc{d.claims, d.passes, d.passFailures, d.lastSuccess, d.interval, d.givenUp} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (c *RecovererCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.descs
	s := c.r.Stats()
	for _, o := range recoverer.Outcomes {
		ch <- prometheus.MustNewConstMetric(d.claims, prometheus.CounterValue, float64(s.Outcomes[o]), string(o))
	}
	ch <- prometheus.MustNewConstMetric(d.passes, prometheus.CounterValue, float64(s.Passes))
	ch <- prometheus.MustNewConstMetric(d.passFailures, prometheus.CounterValue, float64(s.PassFailures))
	var last float64
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(d.lastSuccess, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(d.interval, prometheus.GaugeValue, s.Interval.Seconds())
	ch <- prometheus.MustNewConstMetric(d.givenUp, prometheus.GaugeValue, float64(s.GivenUp))
}
