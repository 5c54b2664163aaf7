package server_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"
)

// freezeGate holds every statement of the connections it guards while
// frozen: a database path that stops moving (a hung disk, a stalled
// network filesystem), so that one "replica" cannot reach SQLite while
// another on the same file can. A held statement returns its context's
// error when the context ends.
type freezeGate struct {
	mu   sync.Mutex
	thaw chan struct{} // closed while not frozen
}

func newFreezeGate() *freezeGate {
	g := &freezeGate{thaw: make(chan struct{})}
	close(g.thaw)
	return g
}

func (g *freezeGate) Freeze() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.thaw:
		g.thaw = make(chan struct{})
	default:
	}
}

func (g *freezeGate) Thaw() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.thaw:
	default:
		close(g.thaw)
	}
}

func (g *freezeGate) wait(ctx context.Context) error {
	g.mu.Lock()
	thaw := g.thaw
	g.mu.Unlock()
	select {
	case <-thaw:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openFreezableSQLite opens the SQLite file at path as sqlitestore.Open
// does, through gate.
func openFreezableSQLite(t testing.TB, path string, gate *freezeGate) *sql.DB {
	t.Helper()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db := sql.OpenDB(&freezeConnector{dsn: dsn, gate: gate})
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.PingContext(context.Background()))
	return db
}

type freezeConnector struct {
	dsn  string
	gate *freezeGate
}

func (c *freezeConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	conn, err := (&sqlite.Driver{}).Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &freezeConn{Conn: conn, gate: c.gate}, nil
}

func (c *freezeConnector) Driver() driver.Driver { return &sqlite.Driver{} }

// freezeConn is a modernc.org/sqlite connection whose statements wait for
// the gate.
type freezeConn struct {
	driver.Conn
	gate *freezeGate
}

func (c *freezeConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *freezeConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *freezeConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *freezeConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.gate.wait(ctx); err != nil {
		return nil, err
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *freezeConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}
