package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idemkit/internal/wire"
)

// insertIntentArgs is the number of arguments of one intent's row.
const insertIntentArgs = 13

func insertArgs(n *NewIntent, ts, instance string) []any {
	var creds any
	if n.CredentialHeaders != nil {
		b, _ := json.Marshal(n.CredentialHeaders)
		creds = string(b)
	}
	return []any{n.ID, n.Key, n.Method, n.URL, n.Host, wire.EncodeHeader(n.Header), n.Body, n.Fingerprint, ts, ts, ts, instance, creds}
}

// InsertTx queues n in the caller's transaction (the transactional
// outbox), or returns the intent already queued under the same key when
// its fingerprint matches (ErrKeyReused otherwise).
func (q *Queue) InsertTx(ctx context.Context, tx *sql.Tx, n *NewIntent) (*Intent, error) {
	in, err := insertOne(ctx, tx, n, q.self)
	return in, Interpret(err)
}

// insertOne inserts one intent, or returns the intent already queued under
// the same key when its fingerprint matches (ErrKeyReused otherwise).
func insertOne(ctx context.Context, ex execer, n *NewIntent, instance string) (*Intent, error) {
	ts := wire.FormatTime(n.Now)
	var got string
	err := ex.QueryRowContext(ctx, sqlInsertIntent, insertArgs(n, ts, instance)...).Scan(&got)
	switch {
	case err == nil:
		return insertedIntent(n, ts, instance), nil
	case !errors.Is(err, sql.ErrNoRows):
		return nil, err
	}
	return queuedIntent(ctx, ex, n)
}

// insertedIntent is the intent just inserted from n, stamped ts.
func insertedIntent(n *NewIntent, ts, instance string) *Intent {
	at, _ := wire.ParseTime(ts)
	return &Intent{ID: n.ID, Key: n.Key, State: Pending, Method: n.Method, URL: n.URL,
		Header: n.Header, Body: n.Body, Fingerprint: n.Fingerprint, NextAttemptAt: at, CreatedAt: at, UpdatedAt: at,
		CredentialHeaders: n.CredentialHeaders, Instance: instance}
}

// queuedIntent returns the intent already queued under n's key when its
// fingerprint matches n's (ErrKeyReused otherwise).
func queuedIntent(ctx context.Context, ex execer, n *NewIntent) (*Intent, error) {
	r, err := scanRow(ex.QueryRowContext(ctx, sqlSelectByKey, n.Key))
	if err != nil {
		return nil, err
	}
	in, err := decodeIntent(r)
	if err != nil {
		return nil, err
	}
	if string(in.Fingerprint) != string(n.Fingerprint) {
		return nil, fmt.Errorf("%w: key %q is already queued (intent %s) with a different request", ErrKeyReused, n.Key, in.ID)
	}
	return in, nil
}

// Inserted is the result of one intent of InsertBatch.
type Inserted struct {
	Intent *Intent
	Err    error
}

// insertIntentsSQL is the insert of n intents in one statement.
func insertIntentsSQL(n int) string {
	if n == 1 {
		return sqlInsertIntent
	}
	var sb strings.Builder
	sb.Grow(len(sqlInsertIntentHead) + n*(len(sqlInsertIntentRow)+1) + len(sqlInsertIntentTail))
	sb.WriteString(sqlInsertIntentHead)
	for k := range n {
		if k > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(sqlInsertIntentRow)
	}
	sb.WriteString(sqlInsertIntentTail)
	return sb.String()
}

// InsertBatch queues every intent in one transaction: one fsync for all of
// them (the client's group commit). An intent whose ctx ended before the
// batch started is skipped with ctx's error. The i-th result is the i-th
// intent's.
//
// The rows go in with one multi-row INSERT: modernc.org/sqlite compiles a
// statement on every execution (a *sql.Stmt saves nothing), so a statement
// per row spent more CPU parsing SQL than inserting. A key already queued,
// or repeated within the batch, is not in the RETURNING set; only those are
// looked up, as InsertTx does.
func (q *Queue) InsertBatch(ctx context.Context, ctxs []context.Context, ns []*NewIntent) []Inserted {
	q.Batches.Add(1)
	results := make([]Inserted, len(ns))
	err := q.InTx(ctx, func(ex execer) error {
		live := make([]int, 0, len(ns))
		for i := range ns {
			if err := ctxs[i].Err(); err != nil {
				results[i].Err = err
				continue
			}
			live = append(live, i)
		}
		if len(live) == 0 {
			return nil
		}
		args := make([]any, 0, len(live)*insertIntentArgs)
		stamps := make([]string, len(ns))
		for _, i := range live {
			stamps[i] = wire.FormatTime(ns[i].Now)
			args = append(args, insertArgs(ns[i], stamps[i], q.self)...)
		}
		var rows *sql.Rows
		var err error
		if st := q.preparedInsert(ctx, ex, len(live)); st != nil {
			rows, err = st.QueryContext(ctx, args...)
		} else {
			rows, err = ex.QueryContext(ctx, insertIntentsSQL(len(live)), args...)
		}
		if err != nil {
			return err
		}
		inserted := make(map[string]bool, len(live))
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			inserted[id] = true
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, i := range live {
			n := ns[i]
			if inserted[n.ID] {
				results[i] = Inserted{insertedIntent(n, stamps[i], q.self), nil}
				continue
			}
			in, err := queuedIntent(ctx, ex, n)
			if err != nil && !errors.Is(err, ErrKeyReused) {
				return err
			}
			results[i] = Inserted{in, err}
		}
		return nil
	})
	if err != nil {
		for i := range results {
			if results[i].Err == nil {
				results[i] = Inserted{nil, err}
			}
		}
	}
	return results
}
