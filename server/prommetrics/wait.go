package prommetrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// A Waiter reports how many requests wait for an in-flight original at
// this moment: *server.Middleware (see server.Config.WaitInFlight).
type Waiter interface {
	Waiting() int
}

// A waitLimiter is a Waiter that also reports its bound on waiting
// requests (server.Config.MaxWaiting), as *server.Middleware does.
type waitLimiter interface {
	MaxWaiting() int
}

// NewWaitingGauge returns the gauges of w's waiting requests, read at
// every scrape, with the label store:
//
//	idemkit_server_waiting      requests of w waiting for their in-flight original
//	idemkit_server_max_waiting  the most that may wait at once (server.Config.MaxWaiting)
//
// The second is exported only when w has a MaxWaiting() int method, as
// *server.Middleware has. A waiting count that stays at the bound means
// duplicates are answered 409 at once for want of a waiting place (the
// counter idemkit_server_wait_refused_total of Metrics counts them). Both
// are exported whether waiting is on or not (0 waiting when it is off).
// Register it yourself (nothing global); cfg may be nil, and its Store
// names the label as for NewWithConfig.
func NewWaitingGauge(w Waiter, cfg *Config) (prometheus.Collector, error) {
	if w == nil {
		return nil, errors.New("idemkit/server/prommetrics: NewWaitingGauge: w is nil")
	}
	store := storeLabelDefault
	if cfg != nil && cfg.Store != "" {
		store = cfg.Store
	}
	labels := prometheus.Labels{"store": store}
	c := &waitingCollector{w: w,
		waiting: prometheus.NewDesc("idemkit_server_waiting",
			"Requests waiting for their in-flight original (Config.WaitInFlight).", nil, labels),
	}
	if l, ok := w.(waitLimiter); ok {
		c.limit = l
		c.max = prometheus.NewDesc("idemkit_server_max_waiting",
			"The most requests that may wait for their in-flight original at once (Config.MaxWaiting).", nil, labels)
	}
	return c, nil
}

// waitingCollector is the collector of NewWaitingGauge.
type waitingCollector struct {
	w            Waiter
	limit        waitLimiter // nil if w has no bound to report
	waiting, max *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *waitingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.waiting
	if c.limit != nil {
		ch <- c.max
	}
}

// Collect implements prometheus.Collector.
func (c *waitingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(c.w.Waiting()))
	if c.limit != nil {
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(c.limit.MaxWaiting()))
	}
}
