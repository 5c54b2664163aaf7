package idemriver

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// hostTableName is the table of the windows hosts advertised.
const hostTableName = "idemriver_host"

// migrateLockKey names the advisory lock that serializes Migrate calls on
// one schema (hashed with the schema by PostgreSQL's hashtextextended).
const migrateLockKey = "idemriver.Migrate:"

// Migrate brings River's tables (with rivermigrate) and this package's up to
// date in schema ("" for the connection's search_path). It is idempotent,
// and safe to call from many processes at once (every service may call it
// at start): the callers take turns on a PostgreSQL advisory lock, held on
// a connection of its own (not one of pool's, so a pool of one connection
// works too), and each finds the work of those before it done. A service
// that migrates River with its own tooling (River's CLI) may call it
// anyway: River's part then does nothing.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	lock, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("idemriver: migrate: connect for the migration lock: %w", err)
	}
	defer lock.Close(context.WithoutCancel(ctx)) // closing also releases the lock
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, migrateLockKey+schema); err != nil {
		return fmt.Errorf("idemriver: migrate: take the migration lock: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return fmt.Errorf("idemriver: migrate: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("idemriver: migrate river: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The windows hosts advertised (Idempotency-Window), shared by every
		// worker; and the lookup of an intent's job by intent id.
		stmts := []string{
			`CREATE TABLE IF NOT EXISTS ` + qualify(schema, hostTableName) + ` (
				host text PRIMARY KEY,
				window_ms bigint NOT NULL CHECK (window_ms > 0),
				updated_at timestamptz NOT NULL DEFAULT now()
			)`,
			`CREATE INDEX IF NOT EXISTS river_job_idemkit_intent_id ON ` + qualify(schema, "river_job") +
				` ((args->>'id')) WHERE kind = '` + intentKind + `'`,
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("idemriver: migrate: %w", err)
			}
		}
		return nil
	})
}
