package clientmetrics

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idemkit"
)

// queueTimeout bounds the Counts call of one scrape.
const queueTimeout = 5 * time.Second

// QueueCollector is a prometheus.Collector of a client's queue: its
// intents by state (Client.Counts, which reads the whole table: scrape it
// at 15 s or more) and the size of its file.
type QueueCollector struct {
	client  *idemkit.Client
	path    string
	intents *prometheus.Desc
	bytes   *prometheus.Desc
	up      *prometheus.Desc
}

// NewQueueCollector returns a collector of c's queue, whose file is path
// (the path given to idemkit.Open). Register it: reg.Register(q).
func NewQueueCollector(c *idemkit.Client, path string) (*QueueCollector, error) {
	if c == nil {
		return nil, errors.New("idemkit/clientmetrics: NewQueueCollector: client is nil")
	}
	return &QueueCollector{
		client:  c,
		path:    path,
		intents: prometheus.NewDesc("idemkit_client_intents", "Intents in the queue by state.", []string{"state"}, nil),
		bytes:   prometheus.NewDesc("idemkit_client_queue_file_bytes", "Size of the queue file with its -wal.", nil, nil),
		up:      prometheus.NewDesc("idemkit_client_queue_up", "1 if the last read of the queue succeeded, else 0.", nil, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (q *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.intents
	ch <- q.bytes
	ch <- q.up
}

// Collect implements prometheus.Collector.
func (q *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	var size int64
	for _, p := range []string{q.path, q.path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			size += fi.Size()
		}
	}
	ch <- prometheus.MustNewConstMetric(q.bytes, prometheus.GaugeValue, float64(size))
	ctx, cancel := context.WithTimeout(context.Background(), queueTimeout)
	defer cancel()
	counts, err := q.client.Counts(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(q.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(q.up, prometheus.GaugeValue, 1)
	for _, s := range states {
		ch <- prometheus.MustNewConstMetric(q.intents, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}
