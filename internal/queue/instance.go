package queue

import (
	"context"
)

// A queue knows where it lives. Its first open records the host and the
// absolute path of the file; every intent records the instance (host and
// path) that queued it. A copy of the file opened on another host or at
// another path does not send the intents it did not start (Foreign);
// Adopt sends them anyway, on purpose.

// Locate records the queue's instance if it has none, and sets Self
// (host|path, this client) and Origin (the recorded one).
func (q *Queue) Locate(ctx context.Context, host, path string, now string) error {
	q.self = host + "|" + path
	return q.InTx(ctx, func(ex execer) error {
		if _, err := ex.ExecContext(ctx, `INSERT INTO idemkit_instance (id, host, path, created_at) VALUES (1, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, host, path, now); err != nil {
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
func (q *Queue) instanceOf(in *Intent) string {
	if in.Instance == "" {
		return q.origin
	}
	return in.Instance
}

// Foreign returns a Foreign Error if in is pending and was queued by
// another instance.
func (q *Queue) Foreign(in *Intent) error {
	if in.State != Pending {
		return nil
	}
	if o := q.instanceOf(in); o != q.self {
		return &Error{problem: Foreign, IntentID: in.ID, Origin: o, Here: q.self}
	}
	return nil
}

// CountForeign counts the pending intents queued by another instance.
func (q *Queue) CountForeign(ctx context.Context) (int, error) {
	var n int
	err := q.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM idemkit_intents
		WHERE state = 'pending' AND COALESCE(instance, ?1) <> ?2`, q.origin, q.self).Scan(&n)
	return n, Interpret(err)
}

// Adopt makes pending intents queued by another instance this one's
// (pending → pending, instance here): the intent with the given id, or
// every such intent when id is empty. It returns how many it adopted.
func (q *Queue) Adopt(ctx context.Context, id string) (int, error) {
	var n int64
	err := q.InTx(ctx, func(ex execer) error {
		res, err := ex.ExecContext(ctx, `UPDATE idemkit_intents SET instance = ?1
			WHERE state = 'pending' AND COALESCE(instance, ?2) <> ?1 AND (?3 = '' OR id = ?3)`, q.self, q.origin, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
