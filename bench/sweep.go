package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idemkit/server"
)

const sweepPrincipal = "bench-sweep"

// seedExpired puts n expired records in the store: one through Store.Claim,
// copied n-1 times in one statement with only the key changed (through
// jsonb, so the copy does not depend on the table's column list).
func seedExpired(ctx context.Context, env *pgEnv, n int, now time.Time) error {
	fp := sha256.Sum256([]byte(requestBody))
	sc := server.Scope{Principal: sweepPrincipal, Endpoint: "POST /sweep", Key: "expired-template"}
	if _, err := env.store.Claim(ctx, server.ClaimRequest{
		Scope: sc, Fingerprint: fp[:], FingerprintVersion: 1,
		Now: now.Add(-48 * time.Hour), ExpiresAt: now.Add(-24 * time.Hour), LockedUntil: now.Add(-47 * time.Hour),
	}); err != nil {
		return fmt.Errorf("claim the template expired record: %w", err)
	}
	// The store decides times by the database's clock (the claim above keeps
	// only its window and lease as durations), so the template is made
	// expired by that clock here.
	if _, err := env.pool.Exec(ctx, `UPDATE idempotency_keys
SET created_at = now() - interval '48 hours', expires_at = now() - interval '24 hours', locked_until = now() - interval '47 hours'
WHERE principal = $1 AND key = $2`, sc.Principal, sc.Key); err != nil {
		return fmt.Errorf("expire the template record: %w", err)
	}
	if n > 1 {
		// LATERAL, not (jsonb_populate_record(...)).*, which would call the
		// function once per column (8× slower).
		if _, err := env.pool.Exec(ctx, `INSERT INTO idempotency_keys
SELECT r.* FROM idempotency_keys t
CROSS JOIN generate_series(1, $3::int) g
CROSS JOIN LATERAL jsonb_populate_record(NULL::idempotency_keys, to_jsonb(t) || jsonb_build_object('key', 'expired-' || g)) r
WHERE t.principal = $1 AND t.key = $2`, sc.Principal, sc.Key, n-1); err != nil {
			return fmt.Errorf("copy the expired record: %w", err)
		}
	}
	_, err := env.pool.Exec(ctx, "ANALYZE idempotency_keys")
	return err
}

// runSweep measures the claim latency with cfg.SweepRows expired rows in the
// table, first with no sweep running, then while Store.Sweep deletes them
// (the cell lasts as long as the sweep, at most cfg.sweepMaxDur). It checks
// that every claim acquired its fresh key and that the sweep deleted exactly
// the seeded rows.
func runSweep(ctx context.Context, cfg config, env *pgEnv, rep *report, progress io.Writer) error {
	now := time.Now()
	fmt.Fprintf(progress, "sweep: seeding %d expired rows\n", cfg.SweepRows)
	if err := seedExpired(ctx, env, cfg.SweepRows, now); err != nil {
		return err
	}
	seeded := time.Since(now)
	fp := sha256.Sum256([]byte(requestBody))
	claim := func(ctx context.Context, i int64) error {
		t := time.Now()
		res, err := env.store.Claim(ctx, server.ClaimRequest{
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
	bgLSN, err := walLSN(ctx, env.pool)
	if err != nil {
		return err
	}
	bgStart := time.Now()
	without := load(ctx, cfg.SweepCalls, cfg.cell(), claim)
	if without.errs > 0 {
		return fmt.Errorf("check failed: no errors: %d failed claims without a sweep, first: %w", without.errs, without.firstErr)
	}
	background, err := walSince(ctx, env.pool, bgLSN)
	if err != nil {
		return err
	}
	bgRate := float64(background) / time.Since(bgStart).Seconds()
	c := without.cell("sweep", "claim", "no-sweep", cfg.SweepCalls, 1, 0)
	rep.add(c)
	fmt.Fprintln(progress, c.progressLine())

	swept := make(chan struct{})
	var (
		deleted  int
		sweepErr error
		sweepDur time.Duration
		wal      int64
	)
	go func() {
		defer close(swept)
		lsn, err := walLSN(ctx, env.pool)
		if err != nil {
			sweepErr = err
			return
		}
		t0 := time.Now()
		deleted, sweepErr = env.store.Sweep(ctx, time.Now())
		sweepDur = time.Since(t0)
		if sweepErr == nil {
			wal, sweepErr = walSince(ctx, env.pool, lsn)
		}
	}()
	during := load(ctx, cfg.SweepCalls, bounds{d: cfg.sweepMaxDur, maxOps: cfg.MaxOps, stop: swept}, claim)
	<-swept
	if sweepErr != nil {
		return fmt.Errorf("sweep: %w", sweepErr)
	}
	if during.errs > 0 {
		return fmt.Errorf("check failed: no errors: %d failed claims during the sweep, first: %w", during.errs, during.firstErr)
	}
	if deleted != cfg.SweepRows {
		return fmt.Errorf("check failed: the sweep deleted %d rows, want the %d seeded expired rows", deleted, cfg.SweepRows)
	}
	c = during.cell("sweep", "claim", "during-sweep", cfg.SweepCalls, 1, 1)
	rep.add(c)
	fmt.Fprintln(progress, c.progressLine())
	rep.Sweep = &sweepResult{
		ExpiredRows: cfg.SweepRows, SeedSeconds: seeded.Seconds(), Deleted: deleted, SweepSeconds: sweepDur.Seconds(), Clients: cfg.SweepCalls,
		P99MicrosWithout: without.pct(0.99), P99MicrosDuring: during.pct(0.99),
		WALBytes: wal, BackgroundWALBytesPerSec: bgRate,
	}
	if rep.Sweep.P99MicrosWithout > 0 {
		rep.Sweep.P99Ratio = rep.Sweep.P99MicrosDuring / rep.Sweep.P99MicrosWithout
	}
	return nil
}
