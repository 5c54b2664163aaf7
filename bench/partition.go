package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

// walLSN returns the current WAL position as text (a pg_lsn).
func walLSN(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var lsn string
	err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// walSince returns the WAL bytes written since lsn (by the whole cluster).
func walSince(ctx context.Context, pool *pgxpool.Pool, lsn string) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, lsn).Scan(&n)
	return n, err
}

// partitionResult is the partition section: the same claims as the
// sweeper section's, with the expired rows in a day partition of a
// partitioned table that MaintainPartitions drops.
type partitionResult struct {
	ExpiredRows      int     `json:"expired_rows"`
	SeedSeconds      float64 `json:"seed_seconds"`
	Dropped          int64   `json:"dropped_rows"`
	DropSeconds      float64 `json:"drop_seconds"`
	WALBytes         int64   `json:"wal_bytes_during_drop"`
	Clients          int     `json:"clients"`
	P99MicrosWithout float64 `json:"claim_p99_us_without_drop"`
	P99MicrosDuring  float64 `json:"claim_p99_us_during_drop"`
	P99Ratio         float64 `json:"p99_ratio"`
	// BackgroundWALBytesPerSec is the cluster's WAL rate during the cell
	// without a drop (the claims and anything else the cluster runs).
	BackgroundWALBytesPerSec float64 `json:"background_wal_bytes_per_sec"`
}

// runPartition seeds cfg.SweepRows expired rows into the partition of a
// day two days ago of a partitioned table (pgstore Config.Partitioned, in a
// schema of its own), measures the claim latency without and then during
// the MaintainPartitions call that drops that partition (the during cell
// lasts one cell duration from the drop's start), and the WAL the cluster
// wrote during the drop.
func runPartition(ctx context.Context, cfg config, env *pgEnv, rep *report, progress io.Writer) error {
	schema := env.schema + "_part"
	if _, err := env.pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return err
	}
	defer func() { _, _ = env.pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()
	pcfg := env.pool.Config().Copy()
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := pgstore.New(pool, &pgstore.Config{Partitioned: true})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	var day time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '2 days'`).Scan(&day); err != nil {
		return err
	}
	day = day.UTC()
	name := "idempotency_keys_p" + day.Format("20060102")
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF idempotency_keys FOR VALUES FROM ('%s') TO ('%s')`,
		pgx.Identifier{name}.Sanitize(), day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))); err != nil {
		return err
	}

	start := time.Now()
	fmt.Fprintf(progress, "partition: seeding %d expired rows into %s\n", cfg.SweepRows, name)
	fp := sha256.Sum256([]byte(requestBody))
	// One row, then copies with only the key changed, as seedExpired does.
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at,
     response_status, response_headers, response_body)
SELECT $1, 'POST /sweep', 'expired-' || g, 'completed', $2, 1, 1, NULL, $3::timestamptz + interval '1 hour',
    $3::timestamptz + interval '2 hours', 201, '{"Content-Type":["application/json"]}'::jsonb, convert_to($4, 'UTF8')
FROM generate_series(1, $5::int) g`, sweepPrincipal, fp[:], day, requestBody, cfg.SweepRows); err != nil {
		return fmt.Errorf("seed the partition: %w", err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE idempotency_keys"); err != nil {
		return err
	}
	seeded := time.Since(start)

	claim := func(ctx context.Context, i int64) error {
		t := time.Now()
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: sweepPrincipal, Endpoint: "POST /claim", Key: uuid.NewString()},
			Fingerprint: fp[:], FingerprintVersion: 1,
			Now: t, ExpiresAt: t.Add(24 * time.Hour), LockedUntil: t.Add(30 * time.Second),
		})
		if err != nil {
			return err
		}
		if !res.Acquired {
			return errors.New("the claim of a fresh key did not acquire")
		}
		return nil
	}
	lsn, err := walLSN(ctx, pool)
	if err != nil {
		return err
	}
	t0 := time.Now()
	without := load(ctx, cfg.SweepCalls, cfg.cell(), claim)
	if without.errs > 0 {
		return fmt.Errorf("check failed: no errors: %d failed claims without a drop, first: %w", without.errs, without.firstErr)
	}
	background, err := walSince(ctx, pool, lsn)
	if err != nil {
		return err
	}
	backgroundRate := float64(background) / time.Since(t0).Seconds()
	c := without.cell("partition", "claim", "no-drop", cfg.SweepCalls, 1, 0)
	rep.add(c)
	fmt.Fprintln(progress, c.progressLine())

	var (
		rep2    pgstore.PartitionReport
		dropErr error
		dropDur time.Duration
		wal     int64
	)
	dropped := make(chan struct{})
	go func() {
		defer close(dropped)
		lsn, err := walLSN(ctx, pool)
		if err != nil {
			dropErr = err
			return
		}
		t := time.Now()
		rep2, dropErr = store.MaintainPartitions(ctx, time.Now().Add(-time.Minute))
		dropDur = time.Since(t)
		if dropErr == nil {
			wal, dropErr = walSince(ctx, pool, lsn)
		}
	}()
	during := load(ctx, cfg.SweepCalls, cfg.cell(), claim)
	<-dropped
	if dropErr != nil {
		return fmt.Errorf("drop: %w", dropErr)
	}
	if during.errs > 0 {
		return fmt.Errorf("check failed: no errors: %d failed claims during the drop, first: %w", during.errs, during.firstErr)
	}
	if rep2.DroppedRows != int64(cfg.SweepRows) || len(rep2.Dropped) != 1 || rep2.Dropped[0] != name {
		return fmt.Errorf("check failed: the drop removed %v with %d rows, want %s with the %d seeded rows", rep2.Dropped, rep2.DroppedRows, name, cfg.SweepRows)
	}
	c = during.cell("partition", "claim", "during-drop", cfg.SweepCalls, 1, 1)
	rep.add(c)
	fmt.Fprintln(progress, c.progressLine())
	rep.Partition = &partitionResult{
		ExpiredRows: cfg.SweepRows, SeedSeconds: seeded.Seconds(), Dropped: rep2.DroppedRows, DropSeconds: dropDur.Seconds(),
		WALBytes: wal, Clients: cfg.SweepCalls, P99MicrosWithout: without.pct(0.99), P99MicrosDuring: during.pct(0.99),
		BackgroundWALBytesPerSec: backgroundRate,
	}
	if rep.Partition.P99MicrosWithout > 0 {
		rep.Partition.P99Ratio = rep.Partition.P99MicrosDuring / rep.Partition.P99MicrosWithout
	}
	return nil
}
