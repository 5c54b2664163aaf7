package paymentsapi

import (
	"context"
	"embed"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/internal/migrate"
)

// migrationFS holds the payments schema, one directory per dialect
// (dialect.migrations), applied by internal/migrate and recorded in the table
// payments_migrations.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql migrations/mysql/*.sql
var migrationFS embed.FS

// migrationsTable records the applied payments migrations, next to the
// idemkit server's idempotency_migrations.
const migrationsTable = "payments_migrations"

// errKeyReused is returned by ledger.create when the account already has a
// payment made with the same Idempotency-Key but a different request. The
// middleware normally answers this case itself (422); the ledger sees it
// only when the idempotency record is gone (expired and swept) or in lease
// mode.
var errKeyReused = errors.New("payments: idempotency key already used for a different payment")

// The ledger's queries, with '?' placeholders (dialect.bind rewrites them).
const (
	sqlInsertPayment = `INSERT INTO payments (id, account, amount, currency, description, idempotency_key, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (account, idempotency_key) DO NOTHING
RETURNING id, account, amount, currency, description, created_at`

	sqlSelectPaymentByKey = `SELECT id, account, amount, currency, description, created_at
FROM payments WHERE account = ? AND idempotency_key = ?`

	sqlListPayments = `SELECT id, account, amount, currency, description, created_at
FROM payments WHERE account = ? ORDER BY created_at, id`
)

// ledger is where payments live: the same database as the idempotency
// records, reached through d. Writes go on the request's transaction when
// the context carries one (transactional mode, see pgstore.Tx and
// sqlitestore.Tx), and on the database directly otherwise (lease mode).
type ledger struct {
	d dialect
}

// migrate applies the payments migrations the database does not have yet.
// It refuses a database migrated by a newer build (migrate.ErrNewerSchema).
func (l ledger) migrate(ctx context.Context) error {
	dir, target := l.d.migrations()
	ms, err := migrate.Load(migrationFS, dir)
	if err != nil {
		return fmt.Errorf("payments: migrate: %w", err)
	}
	if _, err := migrate.Run(ctx, target, ms); err != nil {
		return fmt.Errorf("payments: migrate: %w", err)
	}
	return nil
}

// create inserts p, made with idempotency key key, and returns the stored
// payment. If the account already has a payment with key, it returns that
// payment when it is the same request and errKeyReused when it is not;
// nothing is inserted then.
func (l ledger) create(ctx context.Context, p Payment, key string) (Payment, error) {
	got, err := l.scanPayment(l.d.queryRow(ctx, l.d.bind(sqlInsertPayment),
		p.ID, p.Account, p.Amount, p.Currency, p.Description, key, l.d.timeArg(p.CreatedAt)))
	if err == nil {
		return got, nil
	}
	if !errors.Is(err, errNoRows) {
		return Payment{}, fmt.Errorf("payments: insert: %w", err)
	}
	// The account already has a payment with this key.
	existing, err := l.scanPayment(l.d.queryRow(ctx, l.d.bind(sqlSelectPaymentByKey), p.Account, key))
	if err != nil {
		return Payment{}, fmt.Errorf("payments: read payment by key: %w", err)
	}
	if !existing.sameRequest(p) {
		return Payment{}, errKeyReused
	}
	return existing, nil
}

// list returns the account's payments, oldest first, read from the database
// (never from a request's transaction).
func (l ledger) list(ctx context.Context, account string) ([]Payment, error) {
	rs, err := l.d.query(ctx, l.d.bind(sqlListPayments), account)
	if err != nil {
		return nil, fmt.Errorf("payments: list: %w", l.d.interpretError(err))
	}
	defer rs.Close()
	out := []Payment{}
	for rs.Next() {
		p, err := l.scanPayment(rs)
		if err != nil {
			return nil, fmt.Errorf("payments: list: %w", err)
		}
		out = append(out, p)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("payments: list: %w", l.d.interpretError(err))
	}
	return out, nil
}

// scanPayment reads one payment row (id, account, amount, currency,
// description, created_at). It returns errNoRows if there is none.
func (l ledger) scanPayment(r row) (Payment, error) {
	var p Payment
	var created any
	if err := r.Scan(&p.ID, &p.Account, &p.Amount, &p.Currency, &p.Description, &created); err != nil {
		return Payment{}, l.d.interpretError(err)
	}
	t, err := l.d.scanTime(created)
	if err != nil {
		return Payment{}, fmt.Errorf("created_at: %w", err)
	}
	p.CreatedAt = t.UTC()
	return p, nil
}
