package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit/server"
)

// convertAttempts bounds the tries of the conversion's swap, each waiting
// at most partitionDropLockTimeout for its locks.
const convertAttempts = 50

// ConvertToPartitioned converts a plain key table with rows into the
// partitioned table of Config.Partitioned, online: claims go on while it
// runs, blocked at most 200ms at once. Every replica must already run with
// Config.Partitioned (whose claims do not need the plain table's unique
// key) and Migrate must have run with it. Steps:
//
//  1. CREATE UNIQUE INDEX CONCURRENTLY on (principal, endpoint, key,
//     created_at): the partitioned table's primary key, built without
//     blocking writes.
//  2. A CHECK (created_at < cutover) added NOT VALID, then validated
//     (neither blocks writes); cutover is the UTC midnight two days ahead.
//  3. In one transaction whose locks wait at most 200ms (retried): the
//     table is renamed idempotency_keys_legacy, the index of step 1
//     replaces its primary key, the partitioned table is created, and the
//     old table is attached as its partition for everything before cutover
//     (the CHECK spares the scan, the index the build).
//  4. The daily partitions from cutover on are created (MaintainPartitions).
//
// The legacy partition is dropped like any other once every row in it has
// expired. It returns nil if the table is already partitioned.
func (s *Store) ConvertToPartitioned(ctx context.Context) error {
	if !s.cfg.Partitioned {
		return errors.New("idemkit/server/pgstore: ConvertToPartitioned: the store is not Config.Partitioned")
	}
	part, err := s.partitioned(ctx, s.pool)
	if err != nil || part {
		return err
	}
	var cutover time.Time
	if err := s.pool.QueryRow(ctx, `SELECT date_trunc('day', clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days'`).Scan(&cutover); err != nil {
		return interpretError(err)
	}
	cut := cutover.UTC().Format(time.RFC3339)
	steps := []string{
		`CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS idempotency_keys_scope_created_idx ON idempotency_keys (principal, endpoint, key, created_at)`,
		`ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_legacy_range`,
		`ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_legacy_range CHECK (created_at < '` + cut + `') NOT VALID`,
		`ALTER TABLE idempotency_keys VALIDATE CONSTRAINT idempotency_keys_legacy_range`,
	}
	for _, q := range steps {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("idemkit/server/pgstore: convert to partitioned: %w", interpretError(err))
		}
	}
	swap := func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for _, q := range []string{
				fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, partitionDropLockTimeout.Milliseconds()),
				`LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE`,
				`ALTER TABLE idempotency_keys RENAME TO idempotency_keys_legacy`,
				// The index built in step 1 becomes the primary key, which
				// the partitioned table's primary key then takes as the
				// partition's: no index is built under the lock.
				`ALTER TABLE idempotency_keys_legacy DROP CONSTRAINT idempotency_keys_pkey`,
				`ALTER TABLE idempotency_keys_legacy ADD CONSTRAINT idempotency_keys_legacy_pkey PRIMARY KEY USING INDEX idempotency_keys_scope_created_idx`,
				pgPartitionedTable,
				pgPartitionedIndex,
				`ALTER TABLE idempotency_keys ATTACH PARTITION idempotency_keys_legacy FOR VALUES FROM (MINVALUE) TO ('` + cut + `')`,
			} {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for attempt := 1; ; attempt++ {
		err := interpretError(swap())
		if err == nil {
			break
		}
		if !errors.Is(err, server.ErrInFlight) || attempt == convertAttempts {
			return fmt.Errorf("idemkit/server/pgstore: convert to partitioned: %w", err)
		}
		if err := pause(ctx, partitionDropLockTimeout); err != nil {
			return err
		}
	}
	_, err = s.MaintainPartitions(ctx, time.Now())
	return err
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
