package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idemkit"
)

// enqueuer is one way of durably queueing a request in an SQLite file.
type enqueuer struct {
	name string
	// open prepares a fresh queue in the file at path.
	open func(ctx context.Context, path string) (queue, error)
}

// queue is an open enqueuer.
type queue struct {
	send func(ctx context.Context, body []byte) error
	// rows closes the queue and counts the rows the file holds.
	rows func(ctx context.Context) (int64, error)
}

// registeredEnqueuers are added by the build (goqite, in the test binary:
// it is a test-only dependency of the module).
var registeredEnqueuers []enqueuer

const clientBaseline = "insert-per-tx"

func builtinEnqueuers() []enqueuer {
	return []enqueuer{
		{name: clientBaseline, open: openInsertPerTx},
		{name: "idemkit-submit", open: openIdemkit},
	}
}

// sqliteDSN opens path with the settings of idemkit's queue: WAL,
// synchronous=FULL (a committed row is on disk), BEGIN IMMEDIATE and a
// busy timeout.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_txlock=immediate"
}

// sqliteConns is the connection pool of the baseline and goqite.
const sqliteConns = 8

func countRows(ctx context.Context, db *sql.DB, table string) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	return n, err
}

// openInsertPerTx is the baseline: one INSERT per transaction into a table
// shaped like idemkit's intents (a unique key, the request, a due time and a
// partial index of pending rows).
func openInsertPerTx(ctx context.Context, path string) (queue, error) {
	db, err := sql.Open("sqlite", sqliteDSN(path))
	if err != nil {
		return queue{}, err
	}
	db.SetMaxOpenConns(sqliteConns)
	if _, err := db.ExecContext(ctx, `CREATE TABLE jobs (
    id TEXT PRIMARY KEY, key TEXT NOT NULL UNIQUE, state TEXT NOT NULL, method TEXT NOT NULL, url TEXT NOT NULL,
    body BLOB NOT NULL, next_attempt_at TEXT NOT NULL, created_at TEXT NOT NULL) STRICT;
CREATE INDEX jobs_due ON jobs (next_attempt_at) WHERE state = 'pending';`); err != nil {
		_ = db.Close()
		return queue{}, err
	}
	return queue{
		send: func(ctx context.Context, body []byte) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			ts := time.Now().UTC().Format(time.RFC3339Nano)
			if _, err := tx.ExecContext(ctx, `INSERT INTO jobs (id, key, state, method, url, body, next_attempt_at, created_at)
VALUES (?, ?, 'pending', 'POST', ?, ?, ?, ?)`, uuid.NewString(), uuid.NewString(), enqueueURL, body, ts, ts); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		rows: func(ctx context.Context) (int64, error) {
			defer db.Close()
			return countRows(ctx, db, "jobs")
		},
	}, nil
}

const enqueueURL = "http://127.0.0.1:1/charges"

// openIdemkit queues with idemkit's Client.Submit; the rows are counted by
// reopening the file after Close.
func openIdemkit(ctx context.Context, path string) (queue, error) {
	c, err := idemkit.Open(ctx, path, nil)
	if err != nil {
		return queue{}, err
	}
	return queue{
		send: func(ctx context.Context, body []byte) error {
			_, err := c.Submit(ctx, &idemkit.Request{URL: enqueueURL, Body: body})
			return err
		},
		rows: func(ctx context.Context) (int64, error) {
			if err := c.Close(); err != nil {
				return 0, err
			}
			again, err := idemkit.Open(ctx, path, nil)
			if err != nil {
				return 0, err
			}
			defer again.Close()
			counts, err := again.Counts(ctx)
			var n int64
			for _, v := range counts {
				n += int64(v)
			}
			return n, err
		},
	}, nil
}

// enqueueBody is a payment-sized request body, 256 bytes.
var enqueueBody = func() []byte {
	b := []byte(`{"amount":4000,"currency":"eur","description":"`)
	b = append(b, bytes.Repeat([]byte("x"), 256-len(b)-2)...)
	return append(b, `"}`...)
}()

// clientCell runs one enqueuer at callers concurrent callers on a fresh file
// and checks that the file holds one row per successful call.
func clientCell(ctx context.Context, cfg config, e enqueuer, callers int, dir string) (*loadResult, error) {
	path := filepath.Join(dir, e.name+"-"+strconv.Itoa(callers)+".db")
	q, err := e.open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	res := load(ctx, callers, cfg.cell(), func(ctx context.Context, _ int64) error {
		return q.send(ctx, enqueueBody)
	})
	rows, err := q.rows(ctx)
	if err != nil {
		return res, fmt.Errorf("count the rows: %w", err)
	}
	if res.errs > 0 {
		return res, fmt.Errorf("check failed: no errors: %d failed calls, first: %w", res.errs, res.firstErr)
	}
	if rows != res.ok {
		return res, fmt.Errorf("check failed: one row per successful call: the file holds %d rows after %d successful calls", rows, res.ok)
	}
	return res, nil
}

// runClient runs cfg.Rounds rounds of every enqueuer at every caller count,
// each cell on a fresh file in a fresh directory under cfg.Dir, the
// enqueuers' order rotated each round.
func runClient(ctx context.Context, cfg config, rep *report, progress io.Writer) error {
	if fs := fsType(cfg.Dir); fs == "tmpfs" {
		fmt.Fprintf(progress, "warning: %s is on tmpfs, where fsync costs nothing: the client figures will not mean what they say (use -dir on a disk)\n", cfg.Dir)
	}
	root, err := os.MkdirTemp(cfg.Dir, "idemkit-bench-client-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	for round := 1; round <= cfg.Rounds; round++ {
		order := rotate(cfg.enqueuers, round-1)
		for _, callers := range cfg.Clients {
			for pos, e := range order {
				if err := ctx.Err(); err != nil {
					return err
				}
				dir, err := os.MkdirTemp(root, "cell-")
				if err != nil {
					return err
				}
				res, err := clientCell(ctx, cfg, e, callers, dir)
				_ = os.RemoveAll(dir)
				if err != nil {
					return fmt.Errorf("round %d, %d callers, %s: %w", round, callers, e.name, err)
				}
				c := res.cell("client", "enqueue", e.name, callers, round, pos)
				rep.add(c)
				fmt.Fprintln(progress, c.progressLine())
			}
		}
	}
	return nil
}
