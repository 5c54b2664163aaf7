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

// NewWaitingGauge returns the gauge idemkit_server_waiting{store}: the
// requests of w waiting for their in-flight original, read at every
// scrape. A value that stays at server.Config.MaxWaiting means duplicates
// are answered 409 at once for want of a waiting place. Register it
// yourself (nothing global); cfg may be nil, and its Store names the label
// as for NewWithConfig.
func NewWaitingGauge(w Waiter, cfg *Config) (prometheus.Collector, error) {
	if w == nil {
		return nil, errors.New("idemkit/server/prommetrics: NewWaitingGauge: w is nil")
	}
	store := storeLabelDefault
	if cfg != nil && cfg.Store != "" {
		store = cfg.Store
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "idemkit", Subsystem: "server", Name: "waiting",
		Help:        "Requests waiting for their in-flight original (Config.WaitInFlight).",
		ConstLabels: prometheus.Labels{"store": store},
	}, func() float64 { return float64(w.Waiting()) }), nil
}
