package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// exitNotFound is the exit status of `store show` when the scope has no
// live record.
const exitNotFound = 3

// storeExitHelp documents the exit statuses of the store commands.
const storeExitHelp = `Exit status:
  0    done
  1    usage error, or the database could not be opened, read or written
  3    show: no live record for that scope`

// storeFlags are the flags of every store command: which database.
type storeFlags struct {
	dsn string
	db  string
	// partitioned is migrate --partitioned.
	partitioned bool
}

// opsStore is what the store commands use of pgstore.Store and
// sqlitestore.Store.
type opsStore interface {
	server.Store
	Migrate(ctx context.Context) error
	Stats(ctx context.Context, now time.Time) (server.StoreStats, error)
	InFlight(ctx context.Context, now time.Time, olderThan time.Duration, limit int) ([]server.Record, error)
}

// openedStore is a store and what closes its database; pg and pool are
// set on PostgreSQL.
type openedStore struct {
	store opsStore
	pg    *pgstore.Store
	pool  *pgxpool.Pool
	close func()
}

// open opens the database of f. A read-only open (readOnly) cannot write:
// PostgreSQL sessions have default_transaction_read_only on, and the SQLite
// file is opened with mode=ro and query_only, so it must exist.
func (f *storeFlags) open(ctx context.Context, readOnly bool) (*openedStore, error) {
	switch {
	case f.dsn != "" && f.db != "":
		return nil, usagef("give --dsn (PostgreSQL) or --db (an SQLite file), not both")
	case f.dsn == "" && f.db == "":
		return nil, usagef("give --dsn postgres://... or --db FILE")
	case f.dsn != "":
		return openPostgres(ctx, f.dsn, readOnly, f.partitioned)
	}
	return openSQLite(ctx, f.db, readOnly)
}

func openPostgres(ctx context.Context, dsn string, readOnly, partitioned bool) (*openedStore, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("--dsn: %v", err)
	}
	cfg.MaxConns = 2
	if readOnly {
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	// A partitioned table is handled as a Config.Partitioned store would:
	// its sweep maintains partitions rather than deleting rows.
	var kind string
	_ = pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass('idempotency_keys')`).Scan(&kind)
	st, err := pgstore.New(pool, &pgstore.Config{Partitioned: kind == "p" || partitioned})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &openedStore{store: st, pg: st, pool: pool, close: pool.Close}, nil
}

func openSQLite(ctx context.Context, path string, readOnly bool) (*openedStore, error) {
	var (
		db  *sql.DB
		err error
	)
	if readOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no database at %s: %w", path, err)
		}
		q := url.Values{}
		q.Add("mode", "ro")
		q.Add("_pragma", "busy_timeout(5000)")
		q.Add("_pragma", "query_only(1)")
		db, err = sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?"+q.Encode())
		if err == nil {
			err = db.PingContext(ctx)
		}
	} else {
		db, err = sqlitestore.Open(ctx, path)
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &openedStore{store: st, close: func() { _ = db.Close() }}, nil
}

// noTable turns the error of a read on a database without the idempotency
// table into one that says so.
func noTable(err error) error {
	if err != nil && (strings.Contains(err.Error(), "no such table") || strings.Contains(err.Error(), "does not exist")) {
		return fmt.Errorf("%w (run idemkit store migrate first?)", err)
	}
	return err
}

func newStoreCmd(e *env, g *globals) *cobra.Command {
	f := &storeFlags{}
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Inspect and maintain a server's idempotency store (PostgreSQL or SQLite)",
		Long: `The store commands work on the idempotency store of a server (server/pgstore or
server/sqlitestore): --dsn postgres://... for PostgreSQL (the table in the DSN's search_path),
or --db FILE for an SQLite file. stats, inflight, show and partitions only read: they open
the database read-only (PostgreSQL: default_transaction_read_only; SQLite: mode=ro and
query_only, which may create the empty -wal and -shm files a WAL database needs). migrate
and sweep write. Each takes --json.

` + storeExitHelp,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.dsn, "dsn", "", "PostgreSQL connection string (postgres://...)")
	pf.StringVar(&f.db, "db", "", "SQLite database file")
	for _, c := range []*cobra.Command{newStoreStatsCmd(e, g, f), newStoreInflightCmd(e, g, f), newStoreShowCmd(e, g, f),
		newStorePartitionsCmd(e, g, f), newStoreMigrateCmd(e, g, f), newStoreSweepCmd(e, g, f)} {
		c.Long = c.Long + "\n\n" + storeExitHelp
		cmd.AddCommand(c)
	}
	return cmd
}

// errNotFound is the cause of exit status exitNotFound.
var errNotFound = errors.New("no live record")
