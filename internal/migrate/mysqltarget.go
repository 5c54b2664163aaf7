package migrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
)

// MySQLTarget is the Target for a MySQL or MariaDB database (any
// database/sql driver; go-sql-driver/mysql in this module). table names the
// versions table; it is created as
//
//	CREATE TABLE IF NOT EXISTS <table> (
//	    version    INT          PRIMARY KEY,
//	    name       VARCHAR(255) NOT NULL,
//	    applied_at DATETIME(6)  NOT NULL
//	)
//
// with applied_at in UTC. The step runs on one connection of db holding the
// named lock lockName (GET_LOCK, per database: the current database's name
// is appended), so that processes migrating one database at once take
// turns and all but the first find nothing to do.
//
// MySQL commits every DDL statement at once: a step cannot be rolled back.
// A migration file may hold several statements, each ending with ';' at the
// end of a line (the driver runs one statement per call); they run in
// order, and a failure leaves the earlier ones applied and the version
// unrecorded, so migrations are written to be rerun (IF NOT EXISTS).
func MySQLTarget(db *sql.DB, table, lockName string) Target {
	return &mysqlTarget{db: db, table: table, lockName: lockName}
}

// mysqlLockWaitSeconds bounds the wait for the migration lock.
const mysqlLockWaitSeconds = 60

type mysqlTarget struct {
	db       *sql.DB
	table    string
	lockName string

	conn *sql.Conn // during a step
}

func (t *mysqlTarget) Lock(ctx context.Context) (int, error) {
	if !identifier(t.table) {
		return 0, fmt.Errorf("versions table %q is not an SQL identifier", t.table)
	}
	conn, err := t.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT(?, COALESCE(DATABASE(), '')), ?)`, t.lockName, mysqlLockWaitSeconds).Scan(&got)
	if err != nil {
		_ = conn.Close()
		return 0, fmt.Errorf("migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		_ = conn.Close()
		return 0, fmt.Errorf("migration lock %q: not granted within %ds", t.lockName, mysqlLockWaitSeconds)
	}
	t.conn = conn
	create := `CREATE TABLE IF NOT EXISTS ` + t.table + ` (
    version    INT          PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB`
	var current int
	if _, err = conn.ExecContext(ctx, create); err == nil {
		err = conn.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+t.table).Scan(&current)
	}
	if err != nil {
		_ = t.Unlock(ctx, err)
		return 0, err
	}
	return current, nil
}

func (t *mysqlTarget) Apply(ctx context.Context, m Migration) error {
	for _, stmt := range SplitStatements(m.SQL) {
		if _, err := t.conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if _, err := t.conn.ExecContext(ctx, `INSERT INTO `+t.table+` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`, m.Version, m.Name); err != nil {
		return fmt.Errorf("record version %d: %w", m.Version, err)
	}
	return nil
}

func (t *mysqlTarget) Unlock(ctx context.Context, _ error) error {
	conn := t.conn
	if conn == nil {
		return nil
	}
	t.conn = nil
	var released sql.NullInt64
	if err := conn.QueryRowContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(CONCAT(?, COALESCE(DATABASE(), '')))`, t.lockName).Scan(&released); err != nil {
		// Closing the session releases the lock.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return conn.Close()
}

// SplitStatements splits a script into its statements: each ends with ';'
// at the end of a line. Lines that are empty or only a "--" comment between
// statements are dropped; a script without a final ';' ends with its last
// statement.
func SplitStatements(script string) []string {
	var (
		out []string
		cur strings.Builder
	)
	for line := range strings.Lines(script) {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
