package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// partitionsAheadDefault is the default Config.PartitionsAhead.
const partitionsAheadDefault = 7

// partitionDropLockTimeout bounds the wait for the locks of a partition's
// creation: one that cannot get them is retried at the next sweep.
const partitionDropLockTimeout = 200 * time.Millisecond

// pgClaimFunction is the claim of a partitioned table, a function so that
// it stays one round trip. A partitioned table's unique keys must include
// its partition key (created_at), so the primary key no longer makes a
// scope unique: a transaction-scoped advisory lock on the scope does. Under
// it the function reads the scope's row in any partition (locking it),
// then inserts a fresh claim, or replaces an expired row by a fresh claim (in today's
// partition, its token one more), or takes over a lapsed lease with a
// matching fingerprint in place; a live row blocks it and it returns no
// row. A live row that blocks it is found by a first read that takes no
// lock at all, so that a replay writes nothing. In transactional mode the lock lasts until the transaction ends, as
// the row lock of the plain table's upsert does, and lock_timeout bounds
// the wait for it (server.ErrInFlight). The lock's key space is the
// pgstore's own (hashtextextended with the seed 0x1de4).
const pgClaimFunction = `CREATE OR REPLACE FUNCTION idempotency_claim(
    p_principal text, p_endpoint text, p_key text, p_fingerprint bytea, p_fingerprint_version integer,
    p_now timestamptz, p_lease bigint, p_window bigint)
RETURNS TABLE (token bigint, kept boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    r record;
BEGIN
    -- A live row that blocks the claim (a replay, a conflict) is read
    -- without a lock: such a claim takes no lock and writes nothing.
    SELECT k.expires_at, k.state, k.locked_until, k.fingerprint, k.fingerprint_version
    INTO r
    FROM idempotency_keys k
    WHERE k.principal = p_principal AND k.endpoint = p_endpoint AND k.key = p_key
    ORDER BY k.created_at DESC
    LIMIT 1;
    IF FOUND AND r.expires_at > v_now AND NOT (r.state = 'in_progress' AND r.locked_until <= v_now
        AND r.fingerprint = p_fingerprint AND r.fingerprint_version = p_fingerprint_version) THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(p_principal || chr(31) || p_endpoint || chr(31) || p_key, 7652));
    SELECT k.token AS tok, k.state, k.expires_at, k.locked_until, k.fingerprint, k.fingerprint_version, k.created_at
    INTO r
    FROM idempotency_keys k
    WHERE k.principal = p_principal AND k.endpoint = p_endpoint AND k.key = p_key
    ORDER BY k.created_at DESC
    LIMIT 1
    FOR UPDATE;
    IF FOUND AND r.expires_at > v_now THEN
        IF r.state = 'in_progress' AND r.locked_until <= v_now
           AND r.fingerprint = p_fingerprint AND r.fingerprint_version = p_fingerprint_version THEN
            UPDATE idempotency_keys k SET
                token = k.token + 1,
                locked_until = v_now + p_lease * interval '1 microsecond',
                expires_at = v_now + p_window * interval '1 microsecond'
            WHERE k.principal = p_principal AND k.endpoint = p_endpoint AND k.key = p_key AND k.created_at = r.created_at;
            RETURN QUERY SELECT r.tok + 1, true;
        END IF;
        RETURN;
    END IF;
    IF FOUND THEN
        DELETE FROM idempotency_keys k
        WHERE k.principal = p_principal AND k.endpoint = p_endpoint AND k.key = p_key AND k.created_at = r.created_at;
    END IF;
    INSERT INTO idempotency_keys
        (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
    VALUES (p_principal, p_endpoint, p_key, 'in_progress', p_fingerprint, p_fingerprint_version,
        coalesce(r.tok, 0) + 1, v_now + p_lease * interval '1 microsecond', v_now, v_now + p_window * interval '1 microsecond')
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN QUERY SELECT coalesce(r.tok, 0) + 1, false;
    END IF;
    -- A conflict: a claim of a replica that does not take the lock yet
    -- (see Config.Partitioned). No row: the caller reads the record.
END
$$`

// pgPartitionedTable is the partitioned idempotency table: the columns of
// the plain one (migrations 001 to 003), partitioned by day of created_at.
const pgPartitionedTable = `CREATE TABLE idempotency_keys (
    principal             text        NOT NULL,
    endpoint              text        NOT NULL,
    key                   text        NOT NULL,
    state                 text        NOT NULL,
    fingerprint           bytea       NOT NULL,
    fingerprint_version   integer     NOT NULL,
    token                 bigint      NOT NULL,
    locked_until          timestamptz,
    response_status       smallint,
    response_headers      jsonb,
    response_body         bytea,
    response_body_omitted boolean     NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL,
    completed_at          timestamptz,
    expires_at            timestamptz NOT NULL,
    PRIMARY KEY (principal, endpoint, key, created_at)
) PARTITION BY RANGE (created_at)`

// pgPartitionedIndex is the expiry index of the partitioned table (the
// plain table's index name stays free for a table converted online).
const pgPartitionedIndex = `CREATE INDEX idempotency_keys_part_expires_at_idx ON idempotency_keys (expires_at)`

// partDialect is the dialect of the partitioned table: the plain dialect
// with the claim of pgClaimFunction, and no ClaimReader (its INSERT ... ON
// CONFLICT (principal, endpoint, key) needs a unique key a partitioned
// table cannot have).
type partDialect struct {
	sqlstore.Dialect
	d *dialect
}

const pgClaimCall = `SELECT token, kept FROM idempotency_claim($1, $2, $3, $4, $5, $6, $7, $8)`

func (p partDialect) Claim(req server.ClaimRequest) (string, []any) {
	return pgClaimCall, p.d.claimArgs(req)
}

// partitioned reports whether the store's table is partitioned.
func (s *Store) partitioned(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (bool, error) {
	var kind string
	err := q.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass('idempotency_keys')`).Scan(&kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return kind == "p", interpretError(err)
}

// migratePartitioned installs the claim function and, when the table is
// still plain and empty (a fresh install), replaces it by the partitioned
// table; then it creates the partitions ahead. A plain table with rows is
// left as it is: ConvertToPartitioned converts it online.
func (s *Store) migratePartitioned(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrateLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgClaimFunction); err != nil {
			return err
		}
		part, err := s.partitioned(ctx, tx)
		if err != nil || part {
			return err
		}
		var empty bool
		if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM idempotency_keys)`).Scan(&empty); err != nil || !empty {
			return err
		}
		for _, q := range []string{`DROP TABLE idempotency_keys`, pgPartitionedTable, pgPartitionedIndex} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("idemkit/server: migrate PostgreSQL (partitioned): %w", interpretError(err))
	}
	_, err = s.MaintainPartitions(ctx, time.Now())
	return err
}

// pgPartitionBounds lists the partitions with the ends of their ranges,
// NULL for MINVALUE and MAXVALUE.
const pgPartitionBounds = `SELECT c.relname,
    (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
    (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'idempotency_keys'::regclass`

// PartitionReport is what MaintainPartitions did.
type PartitionReport struct {
	// Created and Dropped name the partitions created and dropped.
	Created, Dropped []string
	// DroppedRows is the number of rows the dropped partitions held.
	DroppedRows int64
}

// partitionName is the name of the partition of the day that starts at
// day (UTC midnight).
func partitionName(day time.Time) string { return "idempotency_keys_p" + day.Format("20060102") }

// MaintainPartitions keeps a partitioned table's partitions: it creates the
// partitions of the days from today to Config.PartitionsAhead days ahead
// that do not exist (each as a table of its own, then attached, so
// that claims are not blocked), and drops every partition whose range ended
// and whose rows all expired at or before now (the sweeper passes now minus
// its grace), never one that holds a live record: the partition is
// detached with DETACH PARTITION CONCURRENTLY, which blocks no claim, after
// its latest expires_at was read (no expired row can become live again: a
// claim of its scope replaces it by a row in today's partition), then
// dropped. On a plain table it does nothing. Days are UTC days of the
// database's clock.
//
// One process at a time maintains a schema's partitions (a session
// advisory lock): a call that finds another at work returns an empty
// report. A partition that cannot be created or dropped now (a lock not
// granted within 200ms, rows of its range elsewhere) is left for the next
// call; the errors are returned with the report of the rest.
func (s *Store) MaintainPartitions(ctx context.Context, now time.Time) (PartitionReport, error) {
	var rep PartitionReport
	part, err := s.partitioned(ctx, s.pool)
	if err != nil || !part {
		return rep, err
	}
	// One replica at a time: the others' sweepers find the lock taken and
	// leave the partitions to it.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return rep, interpretError(err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended('idemkit/partitions/' || current_schema(), 0))`).Scan(&locked); err != nil {
		return rep, interpretError(err)
	}
	if !locked {
		return rep, nil
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended('idemkit/partitions/' || current_schema(), 0))`)
	}()
	var dbNow time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		return rep, interpretError(err)
	}
	cutoff := now
	if !s.d.callerClock {
		cutoff = dbNow.Add(-max(time.Since(now), 0))
	}
	existing := map[string]bool{}
	type partition struct {
		name     string
		from, to time.Time // from is zero for MINVALUE
	}
	var ranged []partition
	rows, err := conn.Query(ctx, pgPartitionBounds)
	if err != nil {
		return rep, interpretError(err)
	}
	for rows.Next() {
		var (
			name     string
			from, to *time.Time
		)
		if err := rows.Scan(&name, &from, &to); err != nil {
			rows.Close()
			return rep, interpretError(err)
		}
		existing[name] = true
		p := partition{name: name}
		if from != nil {
			p.from = from.UTC()
		}
		if to != nil {
			p.to = to.UTC()
		}
		ranged = append(ranged, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return rep, interpretError(err)
	}

	var errs []error
	today := dbNow.UTC().Truncate(24 * time.Hour)
	for d := 0; d <= s.cfg.PartitionsAhead; d++ {
		day := today.AddDate(0, 0, d)
		name := partitionName(day)
		if existing[name] {
			continue
		}
		overlaps := false
		for _, p := range ranged {
			if !p.to.IsZero() && p.from.Before(day.AddDate(0, 0, 1)) && p.to.After(day) {
				overlaps = true // a partition converted from a plain table covers it
			}
		}
		if overlaps {
			continue
		}
		if err := createPartition(ctx, conn, name, day, day.AddDate(0, 0, 1)); err != nil {
			errs = append(errs, fmt.Errorf("create partition %s: %w", name, err))
			continue
		}
		rep.Created = append(rep.Created, name)
	}
	for _, p := range ranged {
		if p.to.IsZero() || p.to.After(cutoff) {
			continue
		}
		n, dropped, err := dropPartition(ctx, conn, p.name, cutoff)
		if err != nil {
			errs = append(errs, fmt.Errorf("drop partition %s: %w", p.name, err))
			continue
		}
		if dropped {
			rep.Dropped = append(rep.Dropped, p.name)
			rep.DroppedRows += n
		}
	}
	return rep, errors.Join(errs...)
}

// createPartition creates the partition name for [from, to) as a table of
// its own and attaches it, which takes only a SHARE UPDATE EXCLUSIVE lock on
// the parent.
func createPartition(ctx context.Context, conn *pgxpool.Conn, name string, from, to time.Time) error {
	ident := pgx.Identifier{name}.Sanitize()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, partitionDropLockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE `+ident+` (LIKE idempotency_keys INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE idempotency_keys ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
			ident, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339)))
		return err
	})
	return interpretError(err)
}

// dropPartition detaches and drops the partition name if its rows all
// expired at or before cutoff, and returns how many it held.
func dropPartition(ctx context.Context, conn *pgxpool.Conn, name string, cutoff time.Time) (int64, bool, error) {
	ident := pgx.Identifier{name}.Sanitize()
	var (
		n      int64
		latest *time.Time
	)
	if err := conn.QueryRow(ctx, `SELECT count(*), max(expires_at) FROM `+ident).Scan(&n, &latest); err != nil {
		return 0, false, interpretError(err)
	}
	if latest != nil && latest.After(cutoff) {
		return 0, false, nil
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION `+ident+` CONCURRENTLY`); err != nil {
		return 0, false, interpretError(err)
	}
	if _, err := conn.Exec(ctx, `DROP TABLE `+ident); err != nil {
		return 0, false, interpretError(err)
	}
	return n, true, nil
}

// RetentionSlack is how long past its expiry an expired row may stay in
// the table by design: one day (a partition's span) on a partitioned table
// swept by dropping partitions, else 0. The metrics of
// server/prommetrics export it so that the alert rules allow for it.
func (s *Store) RetentionSlack() time.Duration {
	if s.cfg.Partitioned && !s.cfg.PartitionSweepRows {
		return 24 * time.Hour
	}
	return 0
}

// partitionsAheadUnbounded is what PartitionsAhead reports when a partition
// without an upper end (MAXVALUE, or a DEFAULT partition) covers the days
// ahead: about 292 years.
const partitionsAheadUnbounded = time.Duration(math.MaxInt64)

// PartitionsAhead reports how far ahead of now the partitions of a
// partitioned table reach without a gap: from now to the first instant no
// partition covers (0 when now itself has none: every claim fails). A
// partition without an upper end reports about 292 years. MaintainPartitions
// keeps it between Config.PartitionsAhead and Config.PartitionsAhead + 1
// days; when it falls, the sweeper that calls MaintainPartitions is not
// running or fails to create partitions, and claims fail once it reaches 0.
// ok is false on a plain table. It reads the catalog only, and decides by
// the caller's now (it is a report, not a decision). server/prommetrics
// exports it as idemkit_store_partitions_ahead_seconds.
func (s *Store) PartitionsAhead(ctx context.Context, now time.Time) (ahead time.Duration, ok bool, err error) {
	part, err := s.partitioned(ctx, s.pool)
	if err != nil || !part {
		return 0, false, err
	}
	rows, err := s.pool.Query(ctx, `SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
    (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'idempotency_keys'::regclass`)
	if err != nil {
		return 0, true, interpretError(err)
	}
	var parts []partitionBounds
	for rows.Next() {
		var b partitionBounds
		if err := rows.Scan(&b.from, &b.to); err != nil {
			rows.Close()
			return 0, true, interpretError(err)
		}
		parts = append(parts, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, true, interpretError(err)
	}
	return partitionsAhead(now, parts), true, nil
}

// partitionBounds is the range of one partition; nil is MINVALUE, MAXVALUE
// or a DEFAULT partition's.
type partitionBounds struct{ from, to *time.Time }

// partitionsAhead walks from now through the partitions that cover it,
// each from the end of the previous one, and returns how far it got.
func partitionsAhead(now time.Time, parts []partitionBounds) time.Duration {
	at := now
	for range len(parts) {
		covered := false
		for _, p := range parts {
			from, to := p.from, p.to
			if from != nil && from.After(at) {
				continue
			}
			if to == nil {
				return partitionsAheadUnbounded
			}
			if to.After(at) {
				at, covered = *to, true
				break
			}
		}
		if !covered {
			break
		}
	}
	return at.Sub(now)
}
