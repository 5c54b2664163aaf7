package idemkit

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// A queue knows where it lives. Its first open records the host and the
// absolute path of the file; every intent records the instance (host and
// path) that queued it. A copy of the file opened on another host or at
// another path (a backup restored elsewhere, a disk image cloned) does not send the
// intents it did not start: they may have been sent already, and the
// server's window may be over, so sending them again could charge twice.
// Client.Adopt sends them anyway, on purpose. The host is named by its
// hostname and machine id: renaming the host, or reaching the file by
// another path (a bind mount elsewhere), also counts as elsewhere. A backup
// restored in place (same host, same path) passes this check: the
// generation counter of generation.go catches it.

// hostID names this host: the hostname and, where there is one, the
// machine id (which a cloned disk image shares, but a copied file does
// not move with).
func hostID() string {
	name, _ := os.Hostname()
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return name + "#" + id
			}
		}
	}
	return name
}

// mainFile returns the file of db's main database, resolved: "" for an
// in-memory or temporary database, which newClient refuses.
func mainFile(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `PRAGMA database_list`)
	if err != nil {
		return "", interpretError(err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int
		var name, file string
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", interpretError(err)
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
	return "", interpretError(rows.Err())
}

// errInMemory refuses a database that does not outlive its connection.
var errInMemory = errors.New("idemkit: the queue database is in memory (or temporary): an intent would vanish with the process; give Open a file path")

// locate records the queue's instance if it has none, and sets q.self
// (this client) and q.origin (the recorded one).
func (q *queue) locate(ctx context.Context, host, path string, now time.Time) error {
	q.self = host + "|" + path
	return q.inTx(ctx, func(ex execer) error {
		if _, err := ex.ExecContext(ctx, `INSERT INTO idemkit_instance (id, host, path, created_at) VALUES (1, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, host, path, wire.FormatTime(now)); err != nil {
			return err
		}
		var h, p string
		if err := ex.QueryRowContext(ctx, `SELECT host, path FROM idemkit_instance WHERE id = 1`).Scan(&h, &p); err != nil {
			return err
		}
		q.origin = h + "|" + p
		return nil
	})
}

// instanceOf is the instance that queued in.
func (q *queue) instanceOf(in *Intent) string {
	if in.instance == "" {
		return q.origin
	}
	return in.instance
}

// foreign returns a Foreign QueueError if in is pending and was queued by
// another instance.
func (q *queue) foreign(in *Intent) error {
	if in.State != StatePending {
		return nil
	}
	if o := q.instanceOf(in); o != q.self {
		return &QueueError{problem: queueForeign, IntentID: in.ID, Origin: o, Here: q.self}
	}
	return nil
}

// countForeign counts the pending intents queued by another instance.
func (q *queue) countForeign(ctx context.Context) (int, error) {
	var n int
	err := q.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM idemkit_intents
		WHERE state = 'pending' AND COALESCE(instance, ?1) <> ?2`, q.origin, q.self).Scan(&n)
	return n, interpretError(err)
}

// Adopt makes pending intents queued by the queue file at another host or
// path (see [QueueError.Foreign]) this instance's own, so that they are
// sent from here: the intent with the given id, or every such intent when
// id is empty. It returns how many it adopted. Adopt only intents you know
// were never sent, or whose server still remembers their key: the window
// is counted from their first attempt, wherever it happened.
func (c *Client) Adopt(ctx context.Context, id string) (int, error) {
	if c.closed() {
		return 0, ErrClosed
	}
	var n int64
	err := c.q.inTx(ctx, func(ex execer) error {
		res, err := ex.ExecContext(ctx, `UPDATE idemkit_intents SET instance = ?1
			WHERE state = 'pending' AND COALESCE(instance, ?2) <> ?1 AND (?3 = '' OR id = ?3)`, c.q.self, c.q.origin, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		c.log.Info("idemkit: adopted intents queued elsewhere", "count", n, "here", c.q.self)
		c.poke()
	}
	return int(n), nil
}
