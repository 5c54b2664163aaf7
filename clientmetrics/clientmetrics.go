// Package clientmetrics exports Prometheus metrics of an idemkit client
// (package github.com/idemkit/idemkit), built on its public API only: the
// event hook (idemkit.Config.OnEventFunc) and Client.Counts. A client that
// does not use Prometheus links none of it.
//
//	met, err := clientmetrics.New(prometheus.DefaultRegisterer)
//	c, err := idemkit.Open(ctx, path, &idemkit.Config{OnEventFunc: met.Observe})
//	q, err := clientmetrics.NewQueueCollector(c, path)
//	err = prometheus.DefaultRegisterer.Register(q)
//
// The metrics, all with namespace idemkit and subsystem client:
//
//	idemkit_client_attempts_total                  attempts started
//	idemkit_client_answers_total{class}            answers by status class (2xx, 3xx, 4xx, 5xx, other)
//	idemkit_client_replays_total                   answers the server marked as replays
//	idemkit_client_retries_total{queued}           retries: slept out ("false") or written to the queue ("true")
//	idemkit_client_retry_wait_seconds              the wait before each retry (histogram)
//	idemkit_client_intents_ended_total{state}      intents that reached a terminal state in this process
//	idemkit_client_time_to_outcome_seconds         from an intent's first attempt in this process to its end (histogram)
//	idemkit_client_intents{state}                  intents in the queue by state (NewQueueCollector)
//	idemkit_client_queue_file_bytes                the queue file with its -wal (NewQueueCollector)
package clientmetrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idemkit"
)

// maxTracked bounds the intents whose first attempt Metrics remembers for
// idemkit_client_time_to_outcome_seconds; past it, new intents are not
// timed.
const maxTracked = 100_000

// states are the values of the label state, every idemkit.IntentState.
var states = []idemkit.IntentState{idemkit.StatePending, idemkit.StateSucceeded, idemkit.StateFailed,
	idemkit.StateExpired, idemkit.StateCanceled}

// Metrics are the event collectors of one client. Observe is its
// idemkit.Config.OnEventFunc.
type Metrics struct {
	attempts  prometheus.Counter
	answers   *prometheus.CounterVec
	replays   prometheus.Counter
	retries   *prometheus.CounterVec
	retryWait prometheus.Histogram
	ended     *prometheus.CounterVec
	toOutcome prometheus.Histogram

	mu    sync.Mutex
	first map[string]time.Time // intent id -> its first attempt in this process
}

// New returns the collectors, registered on reg. It fails if reg already
// has them: one Metrics per Registerer.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("idemkit/clientmetrics: New: reg is nil")
	}
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "idemkit", Subsystem: "client", Name: name, Help: help}
	}
	m := &Metrics{
		attempts: prometheus.NewCounter(opts("attempts_total", "Attempts started.")),
		answers:  prometheus.NewCounterVec(opts("answers_total", "Answers by status class."), []string{"class"}),
		replays:  prometheus.NewCounter(opts("replays_total", "Answers the server marked as replays.")),
		retries:  prometheus.NewCounterVec(opts("retries_total", "Retries, slept out (queued=false) or written to the queue (queued=true)."), []string{"queued"}),
		retryWait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "idemkit", Subsystem: "client", Name: "retry_wait_seconds",
			Help: "The wait before each retry.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 14)}),
		ended: prometheus.NewCounterVec(opts("intents_ended_total", "Intents that reached a terminal state in this process."), []string{"state"}),
		toOutcome: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "idemkit", Subsystem: "client", Name: "time_to_outcome_seconds",
			Help: "From an intent's first attempt in this process to its terminal state.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 14)}),
		first: make(map[string]time.Time),
	}
	for _, c := range []string{"2xx", "3xx", "4xx", "5xx", "other"} {
		m.answers.WithLabelValues(c)
	}
	for _, q := range []string{"false", "true"} {
		m.retries.WithLabelValues(q)
	}
	for _, s := range states {
		if s != idemkit.StatePending {
			m.ended.WithLabelValues(string(s))
		}
	}
	for _, c := range []prometheus.Collector{m.attempts, m.answers, m.replays, m.retries, m.retryWait, m.ended, m.toOutcome} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("idemkit/clientmetrics: %w", err)
		}
	}
	return m, nil
}

// Observe counts one event. Use it as idemkit.Config.OnEventFunc, or call
// it from yours.
func (m *Metrics) Observe(e idemkit.Event) {
	switch e.Kind {
	case idemkit.EventAttemptStarted:
		m.attempts.Inc()
		m.mu.Lock()
		if _, ok := m.first[e.IntentID]; !ok && len(m.first) < maxTracked {
			m.first[e.IntentID] = e.At
		}
		m.mu.Unlock()
	case idemkit.EventAnswered:
		m.answers.WithLabelValues(statusClass(e.Status)).Inc()
		if e.Replayed {
			m.replays.Inc()
		}
	case idemkit.EventRetrying:
		queued := "false"
		if e.Queued {
			queued = "true"
		}
		m.retries.WithLabelValues(queued).Inc()
		m.retryWait.Observe(e.Wait.Seconds())
	case idemkit.EventEnded:
		m.ended.WithLabelValues(string(e.State)).Inc()
		m.mu.Lock()
		start, ok := m.first[e.IntentID]
		delete(m.first, e.IntentID)
		m.mu.Unlock()
		if ok && !e.At.Before(start) {
			m.toOutcome.Observe(e.At.Sub(start).Seconds())
		}
	}
}

// statusClass is "2xx" for 200-299, and so on; "other" outside 200-599.
func statusClass(status int) string {
	if status < 200 || status > 599 {
		return "other"
	}
	return fmt.Sprintf("%dxx", status/100)
}
