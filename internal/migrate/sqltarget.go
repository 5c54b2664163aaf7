package migrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// SQLTarget is the Target for a database/sql SQLite database. table names
// the versions table (e.g. "idempotency_migrations"); it is created as
//
//	CREATE TABLE IF NOT EXISTS <table> (
//	    version    INTEGER PRIMARY KEY,
//	    name       TEXT    NOT NULL,
//	    applied_at TEXT    NOT NULL
//	) STRICT
//
// and a table of an older layout without the name column (the client's
// idemkit_client_migrations) is written without it. applied_at is now() in
// wire.TimeLayout; now defaults to time.Now.
//
// The step runs on one connection of db inside BEGIN IMMEDIATE, which holds
// SQLite's write lock: a concurrent migration waits (up to the connection's
// busy_timeout) and then finds nothing to do. A Target is for one Run at a
// time.
func SQLTarget(db *sql.DB, table string, now func() time.Time) Target {
	if now == nil {
		now = time.Now
	}
	return &sqlTarget{db: db, table: table, now: now}
}

type sqlTarget struct {
	db    *sql.DB
	table string
	now   func() time.Time

	conn     *sql.Conn // during a step
	withName bool      // the table has a name column
}

func (s *sqlTarget) Lock(ctx context.Context) (int, error) {
	if !identifier(s.table) {
		return 0, fmt.Errorf("versions table %q is not an SQL identifier", s.table)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		_ = conn.Close()
		return 0, fmt.Errorf("begin: %w", err)
	}
	s.conn = conn
	current, err := s.prepare(ctx)
	if err != nil {
		_ = s.Unlock(ctx, err)
		return 0, err
	}
	return current, nil
}

// prepare creates the versions table if needed and reads its layout and
// highest version.
func (s *sqlTarget) prepare(ctx context.Context) (int, error) {
	create := `CREATE TABLE IF NOT EXISTS ` + s.table + ` (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL
) STRICT`
	if _, err := s.conn.ExecContext(ctx, create); err != nil {
		return 0, err
	}
	var n int
	if err := s.conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = 'name'`, s.table).Scan(&n); err != nil {
		return 0, err
	}
	s.withName = n > 0
	var current int
	if err := s.conn.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+s.table).Scan(&current); err != nil {
		return 0, err
	}
	return current, nil
}

func (s *sqlTarget) Apply(ctx context.Context, m Migration) error {
	if _, err := s.conn.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	at := wire.FormatTime(s.now())
	var err error
	if s.withName {
		_, err = s.conn.ExecContext(ctx, `INSERT INTO `+s.table+` (version, name, applied_at) VALUES (?, ?, ?)`, m.Version, m.Name, at)
	} else {
		_, err = s.conn.ExecContext(ctx, `INSERT INTO `+s.table+` (version, applied_at) VALUES (?, ?)`, m.Version, at)
	}
	if err != nil {
		return fmt.Errorf("record version %d: %w", m.Version, err)
	}
	return nil
}

func (s *sqlTarget) Unlock(ctx context.Context, err error) error {
	conn := s.conn
	if conn == nil {
		return nil
	}
	s.conn = nil
	defer conn.Close()
	if err == nil {
		if _, cerr := conn.ExecContext(ctx, "COMMIT"); cerr != nil {
			rollback(ctx, conn)
			return cerr
		}
		return nil
	}
	rollback(ctx, conn)
	return nil
}

// rollback ends the transaction on conn even if ctx is done; if that fails
// too, conn is discarded rather than returned to the pool inside a
// transaction.
func rollback(ctx context.Context, conn *sql.Conn) {
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
}

// identifier reports whether s is a plain SQL identifier: a letter or '_',
// then letters, digits and '_'.
func identifier(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
