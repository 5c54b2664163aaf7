package paymentsapi

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/migrate"
)

// pgTarget is the internal/migrate Target of a PostgreSQL schema: one
// transaction that first takes a transaction-scoped advisory lock (per
// schema), so that processes migrating the same schema take turns, and
// records versions in table.
//
// It lives here, written against pgx, until the server's PostgreSQL driver
// package has its own.
type pgTarget struct {
	pool    *pgxpool.Pool
	table   string // an SQL identifier, from code
	lockKey string // hashed with current_schema() into the advisory lock id

	tx pgx.Tx // during a step
}

func newPgTarget(pool *pgxpool.Pool, table, lockKey string) *pgTarget {
	return &pgTarget{pool: pool, table: table, lockKey: lockKey}
}

func (t *pgTarget) Lock(ctx context.Context) (int, error) {
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	t.tx = tx
	current, err := t.prepare(ctx)
	if err != nil {
		_ = t.Unlock(ctx, err)
		return 0, err
	}
	return current, nil
}

// prepare takes the lock, creates the versions table if needed and reads
// the highest version.
func (t *pgTarget) prepare(ctx context.Context) (int, error) {
	if _, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text || current_schema(), 0))`, t.lockKey); err != nil {
		return 0, fmt.Errorf("advisory lock: %w", err)
	}
	create := `CREATE TABLE IF NOT EXISTS ` + t.table + ` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
	if _, err := t.tx.Exec(ctx, create); err != nil {
		return 0, err
	}
	var current int
	if err := t.tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+t.table).Scan(&current); err != nil {
		return 0, err
	}
	return current, nil
}

func (t *pgTarget) Apply(ctx context.Context, m migrate.Migration) error {
	// No arguments: pgx sends m.SQL as a simple query, which may hold
	// several statements.
	if _, err := t.tx.Exec(ctx, m.SQL); err != nil {
		return err
	}
	if _, err := t.tx.Exec(ctx, `INSERT INTO `+t.table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
		return fmt.Errorf("record version %d: %w", m.Version, err)
	}
	return nil
}

func (t *pgTarget) Unlock(ctx context.Context, err error) error {
	tx := t.tx
	if tx == nil {
		return nil
	}
	t.tx = nil
	if err == nil {
		return tx.Commit(ctx)
	}
	_ = tx.Rollback(context.WithoutCancel(ctx))
	return nil
}
