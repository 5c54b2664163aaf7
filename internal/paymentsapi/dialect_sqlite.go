package paymentsapi

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// sqliteDialect is the ledger on the SQLite database of a
// server.SQLiteStore: '?' placeholders, created_at as wire.TimeLayout text,
// database/sql errors.
type sqliteDialect struct {
	db *sql.DB
}

func (d sqliteDialect) migrations() (string, migrate.Target) {
	return "migrations/sqlite", migrate.SQLTarget(d.db, migrationsTable, nil)
}

func (sqliteDialect) bind(query string) string { return query }

func (d sqliteDialect) queryRow(ctx context.Context, query string, args ...any) row {
	if tx, ok := sqlitestore.Tx(ctx); ok {
		return tx.QueryRowContext(ctx, query, args...)
	}
	return d.db.QueryRowContext(ctx, query, args...)
}

func (d sqliteDialect) query(ctx context.Context, query string, args ...any) (rows, error) {
	rs, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rs}, nil
}

// sqlRows is *sql.Rows with pgx's Close (no error: a result set that was
// read to the end or failed reports through Err).
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

func (sqliteDialect) timeArg(t time.Time) any { return wire.FormatTime(t) }

func (sqliteDialect) scanTime(v any) (time.Time, error) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("got %T, want %s text", v, wire.TimeLayout)
	}
	return wire.ParseTime(s)
}

func (sqliteDialect) interpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", errNoRows, err)
	}
	return err
}

// mayHaveCommitted: SQLite runs in process, and a write that returns an
// error was not committed (its journal rolls it back).
func (sqliteDialect) mayHaveCommitted(error) bool { return false }
