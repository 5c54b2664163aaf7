package paymentsapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server/pgstore"
)

const (
	// pgMigrationLock serialises concurrent migrations of the payments table
	// in one schema (two servers starting at once).
	pgMigrationLock = `SELECT pg_advisory_xact_lock(hashtextextended('idemkit/payments/migrate/' || current_schema(), 0))`

	pgInsertPayment = `INSERT INTO payments (id, account, amount, currency, description, idempotency_key, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (account, idempotency_key) DO NOTHING
RETURNING id, account, amount, currency, description, created_at`

	pgSelectPaymentByKey = `SELECT id, account, amount, currency, description, created_at
FROM payments WHERE account = $1 AND idempotency_key = $2`

	pgListPayments = `SELECT id, account, amount, currency, description, created_at
FROM payments WHERE account = $1 ORDER BY created_at, id`
)

// pgLedger is the ledger on the PostgreSQL database of a
// pgstore.Store.
type pgLedger struct {
	pool *pgxpool.Pool
}

type pgQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (l *pgLedger) querier(ctx context.Context) pgQuerier {
	if tx, ok := pgstore.Tx(ctx); ok {
		return tx
	}
	return l.pool
}

func (l *pgLedger) migrate(ctx context.Context) error {
	files, err := migrationFiles("postgres")
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgMigrationLock); err != nil {
			return err
		}
		for _, f := range files {
			if _, err := tx.Exec(ctx, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("payments: migrate: %w", err)
	}
	return nil
}

func (l *pgLedger) create(ctx context.Context, p Payment, key string) (Payment, error) {
	q := l.querier(ctx)
	got, err := scanPgPayment(q.QueryRow(ctx, pgInsertPayment,
		p.ID, p.Account, p.Amount, p.Currency, p.Description, key, p.CreatedAt))
	if err == nil {
		return got, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, fmt.Errorf("payments: insert: %w", err)
	}
	// The account already has a payment with this key.
	existing, err := scanPgPayment(q.QueryRow(ctx, pgSelectPaymentByKey, p.Account, key))
	if err != nil {
		return Payment{}, fmt.Errorf("payments: read payment by key: %w", err)
	}
	if !existing.sameRequest(p) {
		return Payment{}, errKeyReused
	}
	return existing, nil
}

func (l *pgLedger) list(ctx context.Context, account string) ([]Payment, error) {
	rows, err := l.pool.Query(ctx, pgListPayments, account)
	if err != nil {
		return nil, fmt.Errorf("payments: list: %w", err)
	}
	defer rows.Close()
	out := []Payment{}
	for rows.Next() {
		p, err := scanPgPayment(rows)
		if err != nil {
			return nil, fmt.Errorf("payments: list: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("payments: list: %w", err)
	}
	return out, nil
}

func scanPgPayment(row pgx.Row) (Payment, error) {
	var p Payment
	if err := row.Scan(&p.ID, &p.Account, &p.Amount, &p.Currency, &p.Description, &p.CreatedAt); err != nil {
		return Payment{}, err
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}
