package paymentsapi

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
)

// migrationFS holds the payments schema, one directory per database.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFS embed.FS

// errKeyReused is returned by ledger.create when the account already has a
// payment made with the same Idempotency-Key but a different request. The
// middleware normally answers this case itself (422); the ledger sees it
// only when the idempotency record is gone (expired and swept) or in lease
// mode.
var errKeyReused = errors.New("payments: idempotency key already used for a different payment")

// ledger is where payments live: the same database as the idempotency
// records. Both methods write on the request's transaction when the context
// carries one (transactional mode, see pgstore.Tx and sqlitestore.Tx), and on
// the database directly otherwise (lease mode).
type ledger interface {
	// migrate creates the payments table if it does not exist.
	migrate(ctx context.Context) error
	// create inserts p, made with idempotency key key, and returns the
	// stored payment. If the account already has a payment with key, it
	// returns that payment when it is the same request and errKeyReused
	// when it is not; nothing is inserted then.
	create(ctx context.Context, p Payment, key string) (Payment, error)
	// list returns the account's payments, oldest first.
	list(ctx context.Context, account string) ([]Payment, error)
}

// migrationFiles returns the contents of migrations/<dialect>/*.sql in name
// order.
func migrationFiles(dialect string) ([]string, error) {
	names, err := fs.Glob(migrationFS, "migrations/"+dialect+"/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]string, 0, len(names))
	for _, n := range names {
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, string(b))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("payments: no %s migrations embedded", dialect)
	}
	return out, nil
}
