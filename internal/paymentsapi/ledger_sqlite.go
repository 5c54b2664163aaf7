package paymentsapi

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/server/sqlitestore"
)

// sqliteTimeFormat is the fixed-width text form of created_at.
const sqliteTimeFormat = "2006-01-02T15:04:05.000Z"

const (
	sqliteInsertPayment = `INSERT INTO payments (id, account, amount, currency, description, idempotency_key, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (account, idempotency_key) DO NOTHING
RETURNING id, account, amount, currency, description, created_at`

	sqliteSelectPaymentByKey = `SELECT id, account, amount, currency, description, created_at
FROM payments WHERE account = ? AND idempotency_key = ?`

	sqliteListPayments = `SELECT id, account, amount, currency, description, created_at
FROM payments WHERE account = ? ORDER BY created_at, id`
)

// sqliteLedger is the ledger on the SQLite database of a sqlitestore.Store.
type sqliteLedger struct {
	db *sql.DB
}

type sqliteQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (l *sqliteLedger) querier(ctx context.Context) sqliteQuerier {
	if tx, ok := sqlitestore.Tx(ctx); ok {
		return tx
	}
	return l.db
}

func (l *sqliteLedger) migrate(ctx context.Context) error {
	files, err := migrationFiles("sqlite")
	if err != nil {
		return err
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("payments: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, f := range files {
		if _, err := tx.ExecContext(ctx, f); err != nil {
			return fmt.Errorf("payments: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("payments: migrate: %w", err)
	}
	return nil
}

func (l *sqliteLedger) create(ctx context.Context, p Payment, key string) (Payment, error) {
	q := l.querier(ctx)
	got, err := scanSQLitePayment(q.QueryRowContext(ctx, sqliteInsertPayment,
		p.ID, p.Account, p.Amount, p.Currency, p.Description, key, p.CreatedAt.UTC().Format(sqliteTimeFormat)))
	if err == nil {
		return got, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Payment{}, fmt.Errorf("payments: insert: %w", err)
	}
	// The account already has a payment with this key.
	existing, err := scanSQLitePayment(q.QueryRowContext(ctx, sqliteSelectPaymentByKey, p.Account, key))
	if err != nil {
		return Payment{}, fmt.Errorf("payments: read payment by key: %w", err)
	}
	if !existing.sameRequest(p) {
		return Payment{}, errKeyReused
	}
	return existing, nil
}

func (l *sqliteLedger) list(ctx context.Context, account string) ([]Payment, error) {
	rows, err := l.db.QueryContext(ctx, sqliteListPayments, account)
	if err != nil {
		return nil, fmt.Errorf("payments: list: %w", err)
	}
	defer rows.Close()
	out := []Payment{}
	for rows.Next() {
		p, err := scanSQLitePayment(rows)
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

func scanSQLitePayment(row interface{ Scan(dest ...any) error }) (Payment, error) {
	var p Payment
	var created string
	if err := row.Scan(&p.ID, &p.Account, &p.Amount, &p.Currency, &p.Description, &created); err != nil {
		return Payment{}, err
	}
	t, err := time.Parse(sqliteTimeFormat, created)
	if err != nil {
		return Payment{}, fmt.Errorf("created_at %q: %w", created, err)
	}
	p.CreatedAt = t.UTC()
	return p, nil
}
