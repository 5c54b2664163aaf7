package paymentsapi

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/migrate"
	"github.com/idemkit/idemkit/server/mysqlstore"
)

// myDialect is the ledger on the MySQL or MariaDB database of a
// mysqlstore.Store: '?' placeholders, created_at as DATETIME(6) in UTC,
// database/sql errors. MySQL has no INSERT ... ON CONFLICT DO NOTHING
// RETURNING: the payment's insert is a plain INSERT whose duplicate-key
// error (1062) means the account already has a payment with the key, and
// whose row is the values it inserted.
type myDialect struct {
	db *sql.DB
}

// myTimeLayout is how created_at is written, and read back without the
// driver's parseTime.
const myTimeLayout = "2006-01-02 15:04:05.000000"

// myInsertPayment is sqlInsertPayment as MySQL runs it (bind rewrites it).
const myInsertPayment = `INSERT INTO payments (id, account, amount, currency, description, idempotency_key, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)`

// myDuplicateKey is MySQL's ER_DUP_ENTRY.
const myDuplicateKey = 1062

// migrations: a named lock serialises concurrent migrations of the payments
// table in one database (two servers starting at once).
func (d myDialect) migrations() (string, migrate.Target) {
	return "migrations/mysql", migrate.MySQLTarget(d.db, migrationsTable, "idemkit/payments/migrate/")
}

func (myDialect) bind(query string) string {
	if query == sqlInsertPayment {
		return myInsertPayment
	}
	return query
}

// execer is a *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (d myDialect) queryRow(ctx context.Context, query string, args ...any) row {
	var q execer = d.db
	if tx, ok := mysqlstore.Tx(ctx); ok {
		q = tx
	}
	if query != myInsertPayment {
		return q.QueryRowContext(ctx, query, args...)
	}
	_, err := q.ExecContext(ctx, query, args...)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == myDuplicateKey {
		err = fmt.Errorf("%w: %w", sql.ErrNoRows, err)
	}
	// The row RETURNING would give: id, account, amount, currency,
	// description, created_at.
	return insertedRow{err: err, vals: []any{args[0], args[1], args[2], args[3], args[4], args[6]}}
}

// insertedRow is the row of an INSERT: the values it inserted, or its error.
type insertedRow struct {
	err  error
	vals []any
}

func (r insertedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("payments: scan %d columns of an inserted row of %d", len(dest), len(r.vals))
	}
	for i, v := range r.vals {
		switch d := dest[i].(type) {
		case *string:
			d2, ok := v.(string)
			if !ok {
				return fmt.Errorf("payments: column %d: got %T, want string", i, v)
			}
			*d = d2
		case *int64:
			n, ok := v.(int64)
			if !ok {
				return fmt.Errorf("payments: column %d: got %T, want int64", i, v)
			}
			*d = n
		case *any:
			*d = v
		default:
			return fmt.Errorf("payments: column %d: cannot scan into %T", i, dest[i])
		}
	}
	return nil
}

func (d myDialect) query(ctx context.Context, query string, args ...any) (rows, error) {
	rs, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rs}, nil
}

func (myDialect) timeArg(t time.Time) any { return t.UTC().Format(myTimeLayout) }

func (myDialect) scanTime(v any) (time.Time, error) {
	switch t := v.(type) {
	case time.Time:
		return t, nil
	case []byte:
		return time.Parse(myTimeLayout, string(t))
	case string:
		return time.Parse(myTimeLayout, t)
	}
	return time.Time{}, fmt.Errorf("got %T, want a DATETIME(6)", v)
}

func (myDialect) interpretError(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", errNoRows, err)
	}
	return err
}

// isMySQLDSN reports whether dsn names a MySQL or MariaDB database:
// mysql://user:pass@host:port/db.
func isMySQLDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "mysql://") || strings.HasPrefix(dsn, "mariadb://")
}

// myPoolMaxConnsDefault is the MySQL pool size unless the DSN sets
// pool_max_conns.
const myPoolMaxConnsDefault = 32

// mysqlConfig parses mysql://user:pass@host:port/db?param=value into the
// driver's configuration. Parameters are go-sql-driver's (readTimeout=5s,
// tls=true, ...), except pool_max_conns, the pool size. Without explicit
// ones, every read and write is bounded (readTimeout and writeTimeout 30s,
// so that a frozen network path cannot hold a request forever) and
// statements are interpolated on the client (one round trip each).
func mysqlConfig(dsn string) (*mysql.Config, int, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, 0, err
	}
	if u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return nil, 0, fmt.Errorf("%q: want mysql://user:pass@host:port/database", redactDSN(u))
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.Trim(u.Path, "/")
	if u.Port() == "" {
		cfg.Addr += ":3306"
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.InterpolateParams = true
	cfg.ReadTimeout, cfg.WriteTimeout = 30*time.Second, 30*time.Second
	cfg.Timeout = 10 * time.Second
	maxConns := myPoolMaxConnsDefault
	q := u.Query()
	if v := q.Get("pool_max_conns"); v != "" {
		if _, err := fmt.Sscan(v, &maxConns); err != nil || maxConns < 1 {
			return nil, 0, fmt.Errorf("pool_max_conns=%q: want a positive number", v)
		}
		q.Del("pool_max_conns")
	}
	if len(q) > 0 {
		// Let the driver parse its own parameters.
		base := cfg.FormatDSN()
		sep := "?"
		if strings.Contains(base, "?") {
			sep = "&"
		}
		parsed, err := mysql.ParseDSN(base + sep + q.Encode())
		if err != nil {
			return nil, 0, err
		}
		cfg = parsed
	}
	return cfg, maxConns, nil
}

// redactDSN is u without its password.
func redactDSN(u *url.URL) string { return u.Redacted() }

// openMySQL connects to the database of a mysql:// DSN, migrates the
// idempotency store and returns it with the ledger's dialect; close
// releases the pool.
func openMySQL(ctx context.Context, dsn string) (_ *mysqlstore.Store, _ myDialect, closeFunc func(), err error) {
	cfg, maxConns, err := mysqlConfig(dsn)
	if err != nil {
		return nil, myDialect{}, nil, fmt.Errorf("parse --dsn: %w", err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, myDialect{}, nil, fmt.Errorf("parse --dsn: %w", err)
	}
	db := sql.OpenDB(connector)
	// In transactional mode every in-flight payment holds a connection for
	// its whole handler (its delay included).
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	closeFunc = func() { _ = db.Close() }
	defer func() {
		if err != nil {
			closeFunc()
		}
	}()
	if err := db.PingContext(ctx); err != nil {
		return nil, myDialect{}, nil, fmt.Errorf("connect to MySQL: %w", err)
	}
	st, err := mysqlstore.New(db, nil)
	if err != nil {
		return nil, myDialect{}, nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, myDialect{}, nil, fmt.Errorf("migrate idempotency store: %w", err)
	}
	return st, myDialect{db: db}, closeFunc, nil
}

// mayHaveCommitted: a *mysql.MySQLError, or a read that found no row, is
// the server's own answer, so the statement failed; go-sql-driver returns
// driver.ErrBadConn only when it knows that nothing was sent (a dead
// pooled connection). Any other error (a read timeout, a connection cut
// while waiting for the answer) may have followed a statement the server
// applied.
func (myDialect) mayHaveCommitted(err error) bool {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, errNoRows) {
		return false
	}
	return err != nil
}
