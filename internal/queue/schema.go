package queue

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/migrate"
)

// Schema holds the queue's migrations, schema/NNN_*.up.sql.
//
//go:embed schema/*.up.sql
var Schema embed.FS

// SchemaVersion is the version of the queue schema this package
// writes: the number of its last migration (idemkit_client_migrations;
// Client.SchemaVersion reads it). Open refuses a queue migrated by a newer
// version, whose schema this one cannot write safely.
const SchemaVersion = 7

// MigrationsTable is where a queue records its applied migrations.
const MigrationsTable = "idemkit_client_migrations"

// Migrate applies, in one transaction, the embedded schema files
// (schema/NNN_*.up.sql) above the highest applied version, with the
// module's migration runner. The step is retried while another process
// holds the write lock (several processes opening a fresh file at once),
// for up to busyRetry.
func (q *Queue) Migrate(ctx context.Context, now time.Time) error {
	ms, err := migrate.Load(Schema, "schema")
	if err != nil {
		return err
	}
	target := migrate.SQLTarget(q.db, MigrationsTable, func() time.Time { return now })
	q.wmu.Lock()
	defer q.wmu.Unlock()
	return q.retryBusy(ctx, func() error {
		_, err := migrate.Run(ctx, target, ms)
		if errors.Is(err, migrate.ErrNewerSchema) {
			return &Error{problem: Newer, Err: err}
		}
		return Interpret(err)
	})
}

// StoredVersion reads the version of the queue file's schema: the number
// of the last migration applied to it.
func (q *Queue) StoredVersion(ctx context.Context) (int, error) {
	var v int
	err := q.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+MigrationsTable).Scan(&v)
	return v, Interpret(err)
}

// FirstQuery reads the schema once, which opens a connection and so runs
// its pragmas. Several processes opening a fresh file at once contend for
// the switch to WAL, which does not wait on the busy handler long enough:
// a busy answer is retried, with jitter, for up to wait.
func FirstQuery(ctx context.Context, db *sql.DB, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master`).Scan(&n)
		if err == nil {
			return nil
		}
		err = Interpret(err)
		if !Is(err, Locked) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(time.Duration(2+rand.IntN(20)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ReadJournalMode reads the queue's journal mode: WAL or not (see tx).
func (q *Queue) ReadJournalMode(ctx context.Context) error {
	var mode string
	if err := q.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return Interpret(err)
	}
	q.wal = strings.EqualFold(mode, "wal")
	return nil
}

// MainFile returns the file of db's main database, resolved: "" for an
// in-memory or temporary database, which a client refuses.
func MainFile(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `PRAGMA database_list`)
	if err != nil {
		return "", Interpret(err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var name, file string
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", Interpret(err)
		}
		if name != "main" {
			continue
		}
		if file == "" {
			return "", nil
		}
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
		if real, err := filepath.EvalSymlinks(file); err == nil {
			file = real
		}
		return file, nil
	}
	return "", Interpret(rows.Err())
}
