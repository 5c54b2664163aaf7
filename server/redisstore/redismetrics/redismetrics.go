// Package redismetrics exports what a Redis idempotency store
// (redisstore.Store) must be watched for as Prometheus metrics, in a
// package of its own so that the store links no Prometheus.
//
//	c, err := redismetrics.New(store, prometheus.DefaultRegisterer)
//
// The metrics, read from the server at every scrape:
//
//	idemkit_redis_evicted_keys_total   keys the server evicted (INFO stats evicted_keys, summed over the masters)
//	idemkit_redis_scrape_error         1 when the last read of the server failed, else 0
//
// Any eviction on an idempotency store means records were deleted before
// their window ended, and their keys silently stopped deduplicating. Alert
// on it (testdata/alerts.yml holds this rule, checked with promtool):
//
//	rules:
//	  - alert: IdemkitRedisEvictions
//	    expr: increase(idemkit_redis_evicted_keys_total[5m]) > 0
package redismetrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrapeTimeout bounds the read of the server at a scrape.
const scrapeTimeout = 5 * time.Second

// EvictionCounter is what the collector reads: redisstore.Store.
type EvictionCounter interface {
	Evictions(ctx context.Context) (int64, error)
}

// Collector is a prometheus.Collector of a store's Redis.
type Collector struct {
	store       EvictionCounter
	evicted     *prometheus.Desc
	scrapeError *prometheus.Desc
}

// New returns the collector of store, registered on reg.
func New(store EvictionCounter, reg prometheus.Registerer) (*Collector, error) {
	if store == nil || reg == nil {
		return nil, errors.New("idemkit/server/redisstore/redismetrics: New: store and reg must not be nil")
	}
	c := &Collector{
		store: store,
		evicted: prometheus.NewDesc("idemkit_redis_evicted_keys_total",
			"Keys the Redis of the idempotency store evicted (INFO stats evicted_keys, summed over the masters). Any increase means keys stopped deduplicating.", nil, nil),
		scrapeError: prometheus.NewDesc("idemkit_redis_scrape_error",
			"1 when the last read of the Redis of the idempotency store failed, else 0.", nil, nil),
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.evicted
	ch <- c.scrapeError
}

// Collect implements prometheus.Collector: it reads the server, within 5s.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	n, err := c.store.Evictions(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.scrapeError, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeError, prometheus.GaugeValue, 0)
	ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(n))
}
