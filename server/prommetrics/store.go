package prommetrics

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sweeper"
)

// StatsReader is a store that reports its size and health:
// pgstore.Store and sqlitestore.Store.
type StatsReader interface {
	Stats(ctx context.Context, now time.Time) (server.StoreStats, error)
}

// PoolStatsReader is a store that reports the saturation of its connection
// pool: pgstore.Store and sqlitestore.Store. The StoreCollector exports it
// when its store has the method.
type PoolStatsReader interface {
	PoolStats() server.PoolStats
}

// RetentionSlacker is a store whose expired rows may by design stay past
// their expiry (pgstore.Store on a partitioned table: one day). The
// collector exports it as idemkit_store_retention_slack_seconds, 0 for
// other stores.
type RetentionSlacker interface {
	RetentionSlack() time.Duration
}

// PartitionsAheadReader is a store on a table partitioned by day that
// reports how far ahead of now its partitions reach without a gap
// (pgstore.Store; ok is false on its plain table). The collector exports
// it as idemkit_store_partitions_ahead_seconds, only when ok: claims fail
// once it reaches 0.
type PartitionsAheadReader interface {
	PartitionsAhead(ctx context.Context, now time.Time) (ahead time.Duration, ok bool, err error)
}

// storeTimeoutDefault is the default StoreCollectorConfig.Timeout.
const storeTimeoutDefault = 5 * time.Second

// StoreCollectorConfig configures a StoreCollector. The zero value is
// valid.
type StoreCollectorConfig struct {
	// Store is the value of the label store on every metric; use the same
	// as the Config.Store of the middleware's Metrics. Defaults to
	// "default".
	Store string
	// Sweeper, if set, is the sweeper of the store, whose Stats are
	// exported as idemkit_sweeper_*. Defaults to nil (no sweeper metrics).
	Sweeper *sweeper.Sweeper
	// Window, if set, is the middleware's retention window
	// (server.Config.Window), exported as idemkit_store_window_seconds for
	// the alert rules that compare the table with rate × window. Defaults
	// to 0 (not exported).
	Window time.Duration
	// Timeout bounds the Stats call of one scrape. Defaults to 5s.
	Timeout time.Duration
}

// StoreCollector is a prometheus.Collector over a store's Stats (and
// PoolStats, and its sweeper's Stats): register it on the Registerer of
// your choice. Each scrape calls Stats once, which scans the table: keep
// the scrape interval at 15s or more on a large table.
//
// The metrics, all with the label store:
//
//	idemkit_store_stats_up                         1 if the last Stats (and PartitionsAhead) call succeeded, else 0 (and no idemkit_store_* below)
//	idemkit_store_stats_duration_seconds           how long it took
//	idemkit_store_rows{state}                      rows by state: in_progress, completed (both live), expired (awaiting the sweeper)
//	idemkit_store_stuck_claims                     live in-progress rows whose lease ended (lease mode)
//	idemkit_store_table_bytes                      on-disk size of the table
//	idemkit_store_index_bytes                      on-disk size of its indexes
//	idemkit_store_oldest_record_age_seconds        age of the oldest live record (0 if none)
//	idemkit_store_oldest_expired_age_seconds       how long the oldest expired row has waited for the sweeper (0 if none)
//	idemkit_store_window_seconds                   StoreCollectorConfig.Window, when set
//	idemkit_store_retention_slack_seconds          how long expired rows may stay by design (partitioned table: 1 day)
//	idemkit_store_partitions_ahead_seconds         how far ahead the partitions reach without a gap (partitioned table only)
//	idemkit_store_pool_max_connections             the pool's bound (0: unbounded)
//	idemkit_store_pool_connections{state}          in_use, idle
//	idemkit_store_pool_acquire_waits_total         acquisitions that waited for a connection
//	idemkit_store_pool_acquire_wait_seconds_total  their total wait
//	idemkit_store_pool_acquire_canceled_total      acquisitions that gave up waiting (context ended)
//	idemkit_sweeper_runs_total                     sweeps ended
//	idemkit_sweeper_failures_total                 sweeps failed
//	idemkit_sweeper_deleted_total                  records deleted
//	idemkit_sweeper_last_success_timestamp_seconds end of the last successful sweep (Unix time; 0 before the first)
//	idemkit_sweeper_last_duration_seconds          duration of the last sweep
//	idemkit_sweeper_interval_seconds               the sweeper's interval
//	idemkit_sweeper_grace_seconds                  the sweeper's grace
type StoreCollector struct {
	store   StatsReader
	pool    PoolStatsReader
	parts   PartitionsAheadReader
	cfg     StoreCollectorConfig
	descs   storeDescs
	nowFunc func() time.Time
}

type storeDescs struct {
	up, took, rows, stuck, tableBytes, indexBytes, oldest, oldestExpired, window, slack   *prometheus.Desc
	partsAhead                                                                            *prometheus.Desc
	poolMax, poolConns, poolWaits, poolWaitSeconds, poolCanceled                          *prometheus.Desc
	swRuns, swFailures, swDeleted, swLastSuccess, swLastDuration, swInterval, swGraceDesc *prometheus.Desc
}

// NewStoreCollector returns a collector of store's health; cfg may be nil.
// Register it: reg.Register(c). It fails if store is nil.
func NewStoreCollector(store StatsReader, cfg *StoreCollectorConfig) (*StoreCollector, error) {
	if store == nil {
		return nil, errors.New("idemkit/server/prommetrics: NewStoreCollector: store is nil")
	}
	c := &StoreCollector{store: store, nowFunc: time.Now}
	if cfg != nil {
		c.cfg = *cfg
	}
	c.cfg.Store = cmp.Or(c.cfg.Store, storeLabelDefault)
	c.cfg.Timeout = cmp.Or(c.cfg.Timeout, storeTimeoutDefault)
	c.pool, _ = store.(PoolStatsReader)
	c.parts, _ = store.(PartitionsAheadReader)
	labels := prometheus.Labels{"store": c.cfg.Store}
	desc := func(subsystem, name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("idemkit", subsystem, name), help, variable, labels)
	}
	c.descs = storeDescs{
		up:            desc("store", "stats_up", "1 if the last Stats call of the store succeeded, else 0."),
		took:          desc("store", "stats_duration_seconds", "Duration of the last Stats call."),
		rows:          desc("store", "rows", "Rows of the idempotency table by state: in_progress and completed are live, expired rows await the sweeper.", "state"),
		stuck:         desc("store", "stuck_claims", "Live in-progress rows whose lease ended: claims whose holder died and that no retry has taken over."),
		tableBytes:    desc("store", "table_bytes", "On-disk size of the idempotency table."),
		indexBytes:    desc("store", "index_bytes", "On-disk size of the idempotency table's indexes."),
		oldest:        desc("store", "oldest_record_age_seconds", "Age of the oldest live record (0 if none)."),
		oldestExpired: desc("store", "oldest_expired_age_seconds", "How long the oldest expired row has waited for the sweeper (0 if none)."),
		window:        desc("store", "window_seconds", "The middleware's retention window."),
		slack:         desc("store", "retention_slack_seconds", "How long past its expiry an expired row may stay by design (a partitioned table: one day)."),
		partsAhead: desc("store", "partitions_ahead_seconds",
			"How far ahead of now the partitions of a table partitioned by day reach without a gap: claims fail once it reaches 0."),
		poolMax:   desc("store", "pool_max_connections", "The connection pool's bound (0: unbounded)."),
		poolConns: desc("store", "pool_connections", "Connections of the pool by state: in_use, idle.", "state"),
		poolWaits: desc("store", "pool_acquire_waits_total", "Connection acquisitions that found no idle connection and waited."),
		poolWaitSeconds: desc("store", "pool_acquire_wait_seconds_total",
			"Total time acquisitions waited for a connection."),
		poolCanceled: desc("store", "pool_acquire_canceled_total",
			"Connection acquisitions that gave up waiting because their context ended (in transactional mode: 503 store-unavailable)."),
		swRuns:         desc("sweeper", "runs_total", "Sweeps of expired records that ended."),
		swFailures:     desc("sweeper", "failures_total", "Sweeps of expired records that failed."),
		swDeleted:      desc("sweeper", "deleted_total", "Expired records deleted by the sweeper."),
		swLastSuccess:  desc("sweeper", "last_success_timestamp_seconds", "End of the last successful sweep, in Unix time (0 before the first)."),
		swLastDuration: desc("sweeper", "last_duration_seconds", "Duration of the last sweep."),
		swInterval:     desc("sweeper", "interval_seconds", "Interval between two sweeps."),
		swGraceDesc:    desc("sweeper", "grace_seconds", "How long after its expiry a record is kept before a sweep deletes it."),
	}
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *StoreCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.descs
	for _, x := range []*prometheus.Desc{d.up, d.took, d.rows, d.stuck, d.tableBytes, d.indexBytes, d.oldest, d.oldestExpired, d.slack} {
		ch <- x
	}
	if c.cfg.Window > 0 {
		ch <- d.window
	}
	if c.parts != nil {
		ch <- d.partsAhead
	}
	if c.pool != nil {
		for _, x := range []*prometheus.Desc{d.poolMax, d.poolConns, d.poolWaits, d.poolWaitSeconds, d.poolCanceled} {
			ch <- x
		}
	}
	if c.cfg.Sweeper != nil {
		for _, x := range []*prometheus.Desc{d.swRuns, d.swFailures, d.swDeleted, d.swLastSuccess, d.swLastDuration, d.swInterval, d.swGraceDesc} {
			ch <- x
		}
	}
}

// Collect implements prometheus.Collector: it calls the store's Stats,
// bounded by StoreCollectorConfig.Timeout.
func (c *StoreCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.descs
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v)
	}
	if c.cfg.Window > 0 {
		gauge(d.window, c.cfg.Window.Seconds())
	}
	var slack time.Duration
	if r, ok := c.store.(RetentionSlacker); ok {
		slack = r.RetentionSlack()
	}
	gauge(d.slack, slack.Seconds())
	if c.pool != nil {
		p := c.pool.PoolStats()
		gauge(d.poolMax, float64(p.MaxConns))
		gauge(d.poolConns, float64(p.InUse), "in_use")
		gauge(d.poolConns, float64(p.Idle), "idle")
		counter(d.poolWaits, float64(p.Waits))
		counter(d.poolWaitSeconds, p.WaitDuration.Seconds())
		counter(d.poolCanceled, float64(p.Canceled))
	}
	if sw := c.cfg.Sweeper; sw != nil {
		s := sw.Stats()
		counter(d.swRuns, float64(s.Runs))
		counter(d.swFailures, float64(s.Failures))
		counter(d.swDeleted, float64(s.Deleted))
		var last float64
		if !s.LastSuccess.IsZero() {
			last = float64(s.LastSuccess.UnixMilli()) / 1e3
		}
		gauge(d.swLastSuccess, last)
		gauge(d.swLastDuration, s.LastDuration.Seconds())
		gauge(d.swInterval, s.Interval.Seconds())
		gauge(d.swGraceDesc, s.Grace.Seconds())
	}

	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	now := c.nowFunc()
	st, err := c.store.Stats(ctx, now)
	var (
		ahead       time.Duration
		partitioned bool
	)
	if err == nil && c.parts != nil {
		ahead, partitioned, err = c.parts.PartitionsAhead(ctx, now)
	}
	gauge(d.took, time.Since(start).Seconds())
	if err != nil {
		gauge(d.up, 0)
		return
	}
	gauge(d.up, 1)
	if partitioned {
		gauge(d.partsAhead, ahead.Seconds())
	}
	live := st.Rows - st.Expired
	gauge(d.rows, float64(st.InProgress), "in_progress")
	gauge(d.rows, float64(live-st.InProgress), "completed")
	gauge(d.rows, float64(st.Expired), "expired")
	gauge(d.stuck, float64(st.Stuck))
	gauge(d.tableBytes, float64(st.TableBytes))
	gauge(d.indexBytes, float64(st.IndexBytes))
	gauge(d.oldest, ageSeconds(now, st.OldestCreatedAt))
	gauge(d.oldestExpired, ageSeconds(now, st.OldestExpiresAt))
}

// ageSeconds is now minus t in seconds, 0 for a zero t or one in the
// future.
func ageSeconds(now, t time.Time) float64 {
	if t.IsZero() || !t.Before(now) {
		return 0
	}
	return now.Sub(t).Seconds()
}
