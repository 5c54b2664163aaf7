package prommetrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/prommetrics"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/storetest"
	"github.com/idemkit/idemkit/server/sweeper"
)

// healthStore is a store the collector reads, with what the test needs to
// fill it.
type healthStore interface {
	server.Store
	prommetrics.StatsReader
}

// fillStore claims, at t0: two completed records, a live lease, a lease
// that ran out (stuck) and an expired record.
func fillStore(t *testing.T, ctx context.Context, store server.Store, t0 time.Time) {
	t.Helper()
	claim := func(key string, window, lease time.Duration) int64 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: t0,
			ExpiresAt: t0.Add(window), LockedUntil: t0.Add(lease),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Token
	}
	for _, k := range []string{"done-1", "done-2"} {
		tok := claim(k, time.Hour, time.Minute)
		require.NoError(t, store.Complete(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: k}, tok, t0, &server.StoredResponse{Status: 201}))
	}
	claim("leased", time.Hour, time.Hour)
	claim("stuck", time.Hour, time.Second)
	claim("expired", time.Minute, time.Second)
}

// series returns every series reg gathers, by name and labels (store
// left out), with its value.
func series(t *testing.T, reg *prometheus.Registry, store string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "store" {
					require.Equal(t, store, lp.GetValue(), mf.GetName())
					continue
				}
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(labels)
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// The collector exports the store's rows by state, its stuck claims, the
// ages of its oldest live and oldest expired records, its sizes, its pool
// and its sweeper, on SQLite and PostgreSQL alike.
func TestStoreCollector(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) healthStore
	}{
		{"sqlite", func(t *testing.T) healthStore {
			db, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			st, err := sqlitestore.New(db, nil)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(context.Background()))
			return st
		}},
		{"postgres", func(t *testing.T) healthStore {
			// The database's clock decides: the claims' times are its
			// clock_timestamp(), within a second of the test's t0.
			st, err := pgstore.New(testpg.Pool(t), nil)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(context.Background()))
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := storetest.Context(t)
			store := tc.open(t)
			t0 := time.Now().UTC().Truncate(time.Millisecond)
			fillStore(t, ctx, store, t0)

			// A sweeper whose grace keeps the expired row: its stats are
			// exported all the same.
			sw := sweeper.Start(store, &sweeper.Config{Interval: time.Hour, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler)})
			t.Cleanup(func() { _ = sw.Close() })
			require.Eventually(t, func() bool { return sw.Stats().Runs == 1 }, 10*time.Second, 5*time.Millisecond)

			c, err := prommetrics.NewStoreCollector(store, &prommetrics.StoreCollectorConfig{Store: tc.name, Sweeper: sw, Window: time.Hour})
			require.NoError(t, err)
			now := t0.Add(2 * time.Minute)
			c.SetNow(now)
			reg := prometheus.NewRegistry()
			require.NoError(t, reg.Register(c))

			got := series(t, reg, tc.name)
			want := map[string]float64{
				"idemkit_store_stats_up":                       1,
				"idemkit_store_rows{state=completed}":          2,
				"idemkit_store_rows{state=in_progress}":        2,
				"idemkit_store_rows{state=expired}":            1,
				"idemkit_store_stuck_claims":                   1,
				"idemkit_store_oldest_record_age_seconds":      120,
				"idemkit_store_oldest_expired_age_seconds":     60,
				"idemkit_store_window_seconds":                 3600,
				"idemkit_sweeper_runs_total":                   1,
				"idemkit_sweeper_failures_total":               0,
				"idemkit_sweeper_deleted_total":                0,
				"idemkit_sweeper_interval_seconds":             3600,
				"idemkit_sweeper_grace_seconds":                3600,
				"idemkit_store_pool_connections{state=in_use}": 0,
			}
			for name, v := range want {
				require.Contains(t, got, name)
				require.InDelta(t, v, got[name], 1, name)
			}
			for _, name := range []string{"idemkit_store_table_bytes", "idemkit_store_index_bytes", "idemkit_sweeper_last_success_timestamp_seconds"} {
				require.Positive(t, got[name], name)
			}
			require.Contains(t, got, "idemkit_store_pool_max_connections")
			require.Contains(t, got, "idemkit_store_pool_acquire_waits_total")
			require.Contains(t, got, "idemkit_store_pool_acquire_wait_seconds_total")
			require.Contains(t, got, "idemkit_store_pool_connections{state=idle}")
			require.Contains(t, got, "idemkit_store_stats_duration_seconds")
			require.Contains(t, got, "idemkit_sweeper_last_duration_seconds")
		})
	}
}

// A store that fails reports idemkit_store_stats_up 0 and no store gauges,
// and the scrape itself succeeds.
func TestStoreCollector_StatsFail(t *testing.T) {
	t.Parallel()
	db, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"))
	require.NoError(t, err)
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(context.Background()))
	require.NoError(t, db.Close())
	c, err := prommetrics.NewStoreCollector(st, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	got := series(t, reg, "default")
	require.InDelta(t, 0, got["idemkit_store_stats_up"], 0)
	require.NotContains(t, got, "idemkit_store_rows{state=completed}")
	require.Contains(t, got, "idemkit_store_pool_connections{state=in_use}", fmt.Sprint(got))

	_, err = prommetrics.NewStoreCollector(nil, nil)
	require.ErrorContains(t, err, "store is nil")
}

// Transactional mode holds a pooled connection for each request's whole
// handler: with every connection held, the next request waits and, past
// its store timeout, fails. The collector shows it: in_use at the pool's
// bound, the acquisition that gave up counted, and Stats itself failing
// for want of a connection.
func TestStoreCollector_PoolSaturation(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	cfg, err := pgxpool.ParseConfig(testpg.SchemaDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := pgstore.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	c, err := prommetrics.NewStoreCollector(store, &prommetrics.StoreCollectorConfig{Store: "pg", Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	before := series(t, reg, "pg")
	require.InDelta(t, 1, before["idemkit_store_stats_up"], 0)
	require.InDelta(t, 0, before["idemkit_store_pool_acquire_canceled_total"], 0)

	var held []server.StoreTx
	for range 2 {
		tx, err := store.BeginTx(ctx, time.Second)
		require.NoError(t, err)
		held = append(held, tx)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = store.BeginTx(waitCtx, time.Second)
	cancel()
	require.Error(t, err, "a third transaction waits for a connection until its context ends")

	during := series(t, reg, "pg")
	require.InDelta(t, 2, during["idemkit_store_pool_connections{state=in_use}"], 0)
	require.InDelta(t, 2, during["idemkit_store_pool_max_connections"], 0)
	require.GreaterOrEqual(t, during["idemkit_store_pool_acquire_canceled_total"], 1.0)
	require.InDelta(t, 0, during["idemkit_store_stats_up"], 0, "Stats finds no connection either")
	for _, tx := range held {
		require.NoError(t, tx.Rollback(ctx))
	}
}

// A store on a partitioned table exports how far ahead its partitions
// reach (IdemkitPartitionsAheadLow); on a plain table the series is absent.
func TestStoreCollector_PartitionsAhead(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	pool := testpg.Pool(t)
	store, err := pgstore.New(pool, &pgstore.Config{Partitioned: true, PartitionsAhead: 3})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	c, err := prommetrics.NewStoreCollector(store, &prommetrics.StoreCollectorConfig{Store: "pg"})
	require.NoError(t, err)
	now := time.Now()
	c.SetNow(now)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	got := series(t, reg, "pg")
	today := now.UTC().Truncate(24 * time.Hour)
	require.InDelta(t, today.AddDate(0, 0, 4).Sub(now).Seconds(), got["idemkit_store_partitions_ahead_seconds"], 1,
		"today and the 3 days after it")

	// The sweeper stopped long ago: only today's partition is left.
	for d := 1; d <= 3; d++ {
		_, err := pool.Exec(ctx, `DROP TABLE idempotency_keys_p`+today.AddDate(0, 0, d).Format("20060102"))
		require.NoError(t, err)
	}
	got = series(t, reg, "pg")
	require.InDelta(t, today.AddDate(0, 0, 1).Sub(now).Seconds(), got["idemkit_store_partitions_ahead_seconds"], 1)
	require.InDelta(t, 1, got["idemkit_store_stats_up"], 0)

	plain, err := pgstore.New(testpg.Pool(t), nil)
	require.NoError(t, err)
	require.NoError(t, plain.Migrate(ctx))
	c, err = prommetrics.NewStoreCollector(plain, &prommetrics.StoreCollectorConfig{Store: "plain"})
	require.NoError(t, err)
	reg = prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	got = series(t, reg, "plain")
	require.InDelta(t, 1, got["idemkit_store_stats_up"], 0)
	require.NotContains(t, got, "idemkit_store_partitions_ahead_seconds")
}
