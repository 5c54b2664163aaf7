package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// setupPartitioned returns a migrated store on a partitioned table in a
// fresh schema, by the callers' clock, with a partition for everything
// before today (the suite's fixed dates) besides the daily ones.
func setupPartitioned(t testing.TB, cfg *pgstore.Config) *postgresBundle {
	t.Helper()
	b := &postgresBundle{ctx: storetest.Context(t), pool: testpg.Pool(t)}
	if cfg == nil {
		cfg = &pgstore.Config{SweepChunkSize: 3, PartitionSweepRows: true}
	}
	cfg.Partitioned = true
	store, err := pgstore.New(b.pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(b.ctx))
	b.store = pgstore.WithCallerClock(store)
	var kind string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'idempotency_keys'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind, "Migrate creates the partitioned table on a fresh schema")
	return b
}

// historyPartition adds a partition for everything before the first daily
// one.
func historyPartition(t testing.TB, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(ctx, `CREATE TABLE idempotency_keys_history PARTITION OF idempotency_keys
		FOR VALUES FROM (MINVALUE) TO (date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')`)
	require.NoError(t, err)
}

// The partitioned table keeps the contract of the plain one: the same
// conformance suite, stats and listing.
func TestPartitionedStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) server.Store {
		b := setupPartitioned(t, nil)
		historyPartition(t, b.ctx, b.pool)
		return b.store
	})
}

func TestPartitionedStore_StatsHealthInFlight(t *testing.T) {
	t.Parallel()
	for name, run := range map[string]func(t *testing.T, b *postgresBundle){
		"stats":    func(t *testing.T, b *postgresBundle) { storetest.RunStats(t, b.ctx, b.store) },
		"health":   func(t *testing.T, b *postgresBundle) { storetest.RunHealth(t, b.ctx, b.store) },
		"inflight": func(t *testing.T, b *postgresBundle) { storetest.RunInFlight(t, b.ctx, b.store) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupPartitioned(t, nil)
			historyPartition(t, b.ctx, b.pool)
			run(t, b)
		})
	}
}

// partitions returns the names of the table's partitions.
func partitions(t *testing.T, b *postgresBundle) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'idempotency_keys'::regclass ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// Migrate creates the partitions from today to PartitionsAhead days
// ahead; MaintainPartitions drops a past partition whose rows all expired,
// never one that holds a live record, and Sweep without PartitionSweepRows
// deletes no row one by one.
func TestPartitionedStore_DropsOnlyExpiredPartitions(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, &pgstore.Config{PartitionsAhead: 2})
	var today time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&today))
	today = today.UTC()
	name := func(d time.Time) string { return "idempotency_keys_p" + d.Format("20060102") }
	require.Equal(t, []string{name(today), name(today.AddDate(0, 0, 1)), name(today.AddDate(0, 0, 2))}, partitions(t, b))

	// Two old days: one whose rows all expired, one with a live record.
	day1 := today.AddDate(0, 0, -10)
	day2 := today.AddDate(0, 0, -9)
	for _, d := range []time.Time{day1, day2} {
		_, err := b.pool.Exec(b.ctx, `CREATE TABLE `+name(d)+` PARTITION OF idempotency_keys FOR VALUES FROM ('`+d.Format(time.RFC3339)+`') TO ('`+d.AddDate(0, 0, 1).Format(time.RFC3339)+`')`)
		require.NoError(t, err)
	}
	claim := func(key string, at time.Time, window time.Duration) {
		res, err := b.store.Claim(b.ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "*", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: at, ExpiresAt: at.Add(window), LockedUntil: at.Add(time.Second),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
	}
	for _, k := range []string{"a", "b", "c"} {
		claim("day1-"+k, day1.Add(time.Hour), time.Hour)
	}
	claim("day2-expired", day2.Add(time.Hour), time.Hour)
	claim("day2-live", day2.Add(time.Hour), 30*24*time.Hour)

	// The sweeper's now: five days after day2, minus nothing.
	now := day2.AddDate(0, 0, 5)
	n, err := b.store.Sweep(b.ctx, now)
	require.NoError(t, err)
	require.Equal(t, 3, n, "day1's partition dropped with its 3 rows")
	require.NotContains(t, partitions(t, b), name(day1))
	require.Contains(t, partitions(t, b), name(day2), "a partition with a live record is kept")
	_, err = b.store.Get(b.ctx, server.Scope{Principal: "p", Endpoint: "*", Key: "day2-live"}, now)
	require.NoError(t, err)
	var rows int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&rows))
	require.Equal(t, 2, rows, "without PartitionSweepRows no row is deleted one by one")

	// A scope whose row was dropped is claimed anew.
	res, err := b.store.Claim(b.ctx, server.ClaimRequest{
		Scope: server.Scope{Principal: "p", Endpoint: "*", Key: "day1-a"}, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: today.Add(time.Hour), ExpiresAt: today.Add(2 * time.Hour), LockedUntil: today.Add(time.Hour + time.Second),
	})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Equal(t, int64(1), res.Token)

	// An expired row replaced by a claim moves to the claim's day, with
	// its token one more.
	res, err = b.store.Claim(b.ctx, server.ClaimRequest{
		Scope: server.Scope{Principal: "p", Endpoint: "*", Key: "day2-expired"}, Fingerprint: []byte{2}, FingerprintVersion: 1,
		Now: today.Add(time.Hour), ExpiresAt: today.Add(2 * time.Hour), LockedUntil: today.Add(time.Hour + time.Second),
	})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Equal(t, int64(2), res.Token)
	var part string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT tableoid::regclass::text FROM idempotency_keys WHERE key = 'day2-expired'`).Scan(&part))
	require.Equal(t, name(today), part)
}

// A plain table with rows is converted online: a store with Partitioned on
// claims on the plain table first (Migrate leaves it plain); while claims
// run, ConvertToPartitioned swaps the table; every record made before is
// still replayed, new claims go on, and the days after the cutover get
// their partitions.
func TestPartitionedStore_ConvertOnline(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	dsn := testpg.SchemaDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	plain, err := pgstore.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, plain.Migrate(ctx))
	claim := func(st *pgstore.Store, key string) server.ClaimResult {
		now := time.Now()
		res, err := st.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "*", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute),
		})
		require.NoError(t, err, key)
		return res
	}
	for i := range 20 {
		require.True(t, claim(plain, fmt.Sprint("before-", i)).Acquired)
	}

	part, err := pgstore.New(pool, &pgstore.Config{Partitioned: true})
	require.NoError(t, err)
	require.NoError(t, part.Migrate(ctx))
	var kind string
	require.NoError(t, pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'idempotency_keys'::regclass`).Scan(&kind))
	require.Equal(t, "r", kind, "Migrate leaves a plain table with rows plain")
	require.True(t, claim(part, "rollout").Acquired, "the partitioned store's claims work on the plain table")
	require.False(t, claim(part, "before-0").Acquired, "and see its rows")

	// Claims run while the table is converted.
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			now := time.Now()
			res, err := part.Claim(ctx, server.ClaimRequest{
				Scope:       server.Scope{Principal: "p", Endpoint: "*", Key: fmt.Sprint("during-", n)},
				Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute),
			})
			if err != nil || !res.Acquired {
				t.Errorf("during-%d: acquired %v, error %v", n, res.Acquired, err)
				done <- n
				return
			}
			n++
		}
	}()
	convErr := part.ConvertToPartitioned(ctx)
	close(stop)
	during := <-done
	require.NoError(t, convErr)
	require.Positive(t, during, "claims ran during the conversion")

	require.NoError(t, pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'idempotency_keys'::regclass`).Scan(&kind))
	require.Equal(t, "p", kind)
	for i := range 20 {
		res := claim(part, fmt.Sprint("before-", i))
		require.False(t, res.Acquired, "a record made before the conversion is still live")
	}
	for i := range during {
		require.False(t, claim(part, fmt.Sprint("during-", i)).Acquired)
	}
	require.True(t, claim(part, "after").Acquired)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&rows))
	require.Equal(t, 20+1+during+1, rows)
	names := map[string]bool{}
	for _, n := range partitions(t, &postgresBundle{ctx: ctx, pool: pool}) {
		names[n] = true
	}
	require.True(t, names["idempotency_keys_legacy"], "the old table is a partition")
	var cutover time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days'`).Scan(&cutover))
	require.True(t, names["idempotency_keys_p"+cutover.UTC().Format("20060102")], "the first day after the cutover has its partition: %v", names)
	require.NoError(t, part.ConvertToPartitioned(ctx), "converting twice does nothing")
}

// A replay on the partitioned table writes nothing: the row's version
// (xmin) and its lock (xmax) are the same after it.
func TestPartitionedStore_ReplayWritesNothing(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, nil)
	historyPartition(t, b.ctx, b.pool)
	now := time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	sc := server.Scope{Principal: "p", Endpoint: "*", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)}
	res, err := b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	require.NoError(t, b.store.Complete(b.ctx, sc, res.Token, now, &server.StoredResponse{Status: 201}))
	xmin := func() string {
		var x string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT xmin::text || '/' || xmax::text FROM idempotency_keys WHERE key = 'k'`).Scan(&x))
		return x
	}
	before := xmin()
	res, err = b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	require.False(t, res.Acquired)
	require.Equal(t, server.StateCompleted, res.Existing.State)
	require.Equal(t, before, xmin(), "the replay locked or wrote the row")
}

// BenchmarkClaim_Partitioned compares new-key claims on the plain and the
// partitioned table (the advisory-lock function against the single
// INSERT ... ON CONFLICT statement).
func BenchmarkClaim_Partitioned(b *testing.B) {
	b.Run("Plain", func(b *testing.B) { storetest.BenchClaims(b, storetest.ClaimFunc(setupPostgres(b).store)) })
	b.Run("Partitioned", func(b *testing.B) {
		storetest.BenchClaims(b, storetest.ClaimFunc(setupPartitioned(b, &pgstore.Config{}).store))
	})
}

// PartitionsAhead reports how far the partitions reach without a gap,
// which falls when MaintainPartitions stops and comes back when it runs.
func TestPartitionedStore_PartitionsAhead(t *testing.T) {
	t.Parallel()
	b := setupPartitioned(t, nil)
	const day = 24 * time.Hour
	now := time.Now()
	today := now.UTC().Truncate(day)
	ahead, ok, err := b.store.PartitionsAhead(b.ctx, now)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, today.AddDate(0, 0, 8).Sub(now), ahead, "today and the 7 days after it (Config.PartitionsAhead)")

	// The sweeper stopped: the days from the day after tomorrow on are gone.
	for d := 2; d <= 7; d++ {
		_, err := b.pool.Exec(b.ctx, `DROP TABLE idempotency_keys_p`+today.AddDate(0, 0, d).Format("20060102"))
		require.NoError(t, err)
	}
	ahead, _, err = b.store.PartitionsAhead(b.ctx, now)
	require.NoError(t, err)
	require.Equal(t, today.AddDate(0, 0, 2).Sub(now), ahead)
	require.Less(t, ahead, 2*day, "IdemkitPartitionsAheadLow fires")

	// A gap: tomorrow's partition missing ends the walk at today's end.
	_, err = b.pool.Exec(b.ctx, `DROP TABLE idempotency_keys_p`+today.AddDate(0, 0, 1).Format("20060102"))
	require.NoError(t, err)
	ahead, _, err = b.store.PartitionsAhead(b.ctx, now)
	require.NoError(t, err)
	require.Equal(t, today.AddDate(0, 0, 1).Sub(now), ahead)

	// MaintainPartitions creates them again.
	_, err = b.store.MaintainPartitions(b.ctx, now)
	require.NoError(t, err)
	ahead, _, err = b.store.PartitionsAhead(b.ctx, now)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ahead, 7*day)

	// Before the first partition nothing covers: 0 (claims would fail).
	ahead, _, err = b.store.PartitionsAhead(b.ctx, today.AddDate(0, 0, -3))
	require.NoError(t, err)
	require.Zero(t, ahead)
	// A history partition from MINVALUE covers the past up to the dailies.
	historyPartition(t, b.ctx, b.pool)
	ahead, _, err = b.store.PartitionsAhead(b.ctx, today.AddDate(0, 0, -3))
	require.NoError(t, err)
	require.Equal(t, 11*day, ahead)

	// A DEFAULT partition covers everything.
	_, err = b.pool.Exec(b.ctx, `CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`)
	require.NoError(t, err)
	ahead, _, err = b.store.PartitionsAhead(b.ctx, today.AddDate(1, 0, 0))
	require.NoError(t, err)
	require.Greater(t, ahead, 100*365*day)

	// A plain table has no partitions to report.
	_, ok, err = setupPostgres(t).store.PartitionsAhead(b.ctx, now)
	require.NoError(t, err)
	require.False(t, ok)
}
