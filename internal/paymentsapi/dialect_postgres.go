package paymentsapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/server/pgstore"
)

// pgDialect is the ledger on the PostgreSQL database of a
// server.PostgresStore: $n placeholders, timestamptz, pgx errors.
type pgDialect struct {
	pool *pgxpool.Pool
}

// migrations: the advisory lock serialises concurrent migrations of the
// payments table in one schema (two servers starting at once).
func (d pgDialect) migrations() (string, migrate.Target) {
	return "migrations/postgres", newPgTarget(d.pool, migrationsTable, "idemkit/payments/migrate/")
}

// bind numbers the placeholders: the n-th '?' becomes $n.
func (pgDialect) bind(query string) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		n++
		b.WriteString("$" + strconv.Itoa(n))
	}
	return b.String()
}

func (d pgDialect) queryRow(ctx context.Context, query string, args ...any) row {
	if tx, ok := pgstore.Tx(ctx); ok {
		return tx.QueryRow(ctx, query, args...)
	}
	return d.pool.QueryRow(ctx, query, args...)
}

func (d pgDialect) query(ctx context.Context, query string, args ...any) (rows, error) {
	return d.pool.Query(ctx, query, args...)
}

func (pgDialect) timeArg(t time.Time) any { return t }

func (pgDialect) scanTime(v any) (time.Time, error) {
	t, ok := v.(time.Time)
	if !ok {
		return time.Time{}, fmt.Errorf("got %T, want a timestamptz", v)
	}
	return t, nil
}

func (pgDialect) interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", errNoRows, err)
	}
	return err
}

// mayHaveCommitted: a PostgreSQL error (a *pgconn.PgError) is the server's
// own answer, so the statement failed; otherwise pgconn.SafeToRetry says
// whether pgx knows that nothing was sent.
func (pgDialect) mayHaveCommitted(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return false
	}
	return !pgconn.SafeToRetry(err)
}
