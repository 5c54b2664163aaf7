package paymentsapi

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idemkit/internal/migrate"
)

// dialect is what the ledger needs from a database: where a statement runs,
// the placeholder style, how a time is stored, and the translation of the
// driver's errors. One file per database implements it (dialect_postgres.go,
// dialect_sqlite.go); a new database is one more such file plus its
// migrations directory.
type dialect interface {
	// migrations returns the dialect's directory in migrationFS
	// (migrations/<dialect>, files NNN_description.up.sql) and the
	// internal/migrate Target of the database that applies them.
	migrations() (dir string, t migrate.Target)
	// bind rewrites a query's '?' placeholders into the dialect's style.
	bind(query string) string
	// queryRow runs a statement that returns at most one row, on the
	// request's transaction when ctx carries one, else on the database.
	queryRow(ctx context.Context, query string, args ...any) row
	// query runs a statement on the database.
	query(ctx context.Context, query string, args ...any) (rows, error)
	// timeArg is t as the dialect stores it.
	timeArg(t time.Time) any
	// scanTime is the time stored as v (what the driver scans into an any).
	scanTime(v any) (time.Time, error)
	// interpretError maps the driver's "no rows" to errNoRows, keeping
	// the driver's error as the cause; other errors pass unchanged.
	interpretError(err error) error
	// mayHaveCommitted reports whether an autocommitted write that failed
	// with err may nevertheless have been applied: the driver cannot say
	// that the statement was not sent, and the database did not answer
	// with an error of its own (its answer was lost on the way back).
	mayHaveCommitted(err error) bool
}

// errNoRows is the dialect-independent "the query returned no row".
var errNoRows = errors.New("payments: no rows")

// row is one result row: pgx.Row and *sql.Row.
type row interface {
	Scan(dest ...any) error
}

// rows is a result set: pgx.Rows, and *sql.Rows as sqlRows.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}
