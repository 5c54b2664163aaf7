package server

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

type ctxKey int

const (
	ctxKeyScope ctxKey = iota
	ctxKeyTx
)

// ScopeFromContext returns the scope (principal, endpoint and key) of the
// request the middleware is running a handler for. Lease-mode handlers
// forward Scope.DownstreamKey() to downstream services as their idempotency
// key, so that a takeover after a crash repeats the downstream call safely
// (not Scope.Key: a downstream shared by all principals would merge two
// tenants' calls that happen to use the same key string).
func ScopeFromContext(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(ctxKeyScope).(Scope)
	return s, ok
}

// PgxTx returns the transaction of a transactional-mode request on a
// PostgresStore. The handler writes its effect on it; the middleware stores
// the response in it and commits. The handler must not commit or roll it
// back.
func PgxTx(ctx context.Context) (pgx.Tx, bool) {
	tx, ok := ctx.Value(ctxKeyTx).(pgx.Tx)
	return tx, ok
}

// SQLTx is like PgxTx, for a SQLiteStore: the *sql.Tx on the store's
// database.
func SQLTx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(ctxKeyTx).(*sql.Tx)
	return tx, ok
}
