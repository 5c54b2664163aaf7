package idemkit

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// Group commit: concurrent Submit calls share one transaction, and so one
// fsync. A lone Submit commits on its own goroutine (see Client.Submit);
// the others are batched by the committer goroutine NewClient starts and
// Close stops.

// commitLoop is the group committer: every Submit waiting when a batch
// starts is inserted in that batch's one transaction (one fsync).
//
// The callers of one batch are all answered at once and come back together,
// a few microseconds later; a committer that started the next batch with the
// first of them to arrive would commit it with one or two intents while the
// rest waited a whole fsync for the batch after, halving the batch size (16
// intents per fsync at 32 callers). So when a batch has fewer intents than
// the previous one, the committer waits for the missing ones, at most
// gatherWait (never longer than the previous commit took): a lone caller
// (previous batch of one) never waits, and callers that went away cost one
// short wait, after which the target shrinks to what came.
func (c *Client) commitLoop() {
	defer c.wg.Done()
	last := 1 // intents in the previous batch
	var lastTook time.Duration
	for {
		select {
		case op := <-c.submitCh:
			batch := c.gather([]*submitOp{op}, last, min(lastTook, gatherWait))
			start := time.Now()
			c.q.insertBatch(context.Background(), batch)
			last, lastTook = len(batch), time.Since(start)
		case <-c.closeCtx.Done():
			for {
				select {
				case op := <-c.submitCh:
					op.done <- submitResult{nil, ErrClosed}
				default:
					return
				}
			}
		}
	}
}

// gather adds to batch every Submit already waiting, then, while it holds
// fewer than want, those arriving within wait.
func (c *Client) gather(batch []*submitOp, want int, wait time.Duration) []*submitOp {
	for len(batch) < submitBatchMax {
		select {
		case op := <-c.submitCh:
			batch = append(batch, op)
			continue
		default:
		}
		break
	}
	if len(batch) >= want || wait <= 0 {
		return batch
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(batch) < want && len(batch) < submitBatchMax {
		select {
		case op := <-c.submitCh:
			batch = append(batch, op)
		case <-t.C:
			return batch
		case <-c.closeCtx.Done():
			return batch
		}
	}
	return batch
}

// submitOp is one Submit waiting for the group committer.
type submitOp struct {
	ctx  context.Context
	p    *prepared
	id   string
	now  time.Time
	done chan submitResult
}

type submitResult struct {
	in  *Intent
	err error
}

// insertBatch inserts every op in one transaction: one fsync for all of
// them. An op whose context ended before the batch started is skipped.
//
// The rows go in with one multi-row INSERT: modernc.org/sqlite compiles a
// statement on every execution (a *sql.Stmt saves nothing), so a statement
// per row spent more CPU parsing SQL than inserting. A key already queued,
// or repeated within the batch, is not in the RETURNING set; only those are
// looked up, as insertOne does.
func (q *queue) insertBatch(ctx context.Context, ops []*submitOp) {
	q.batches.Add(1)
	results := make([]submitResult, len(ops))
	err := q.inTx(ctx, func(ex execer) error {
		live := make([]int, 0, len(ops))
		for i, op := range ops {
			if err := op.ctx.Err(); err != nil {
				results[i].err = err
				continue
			}
			live = append(live, i)
		}
		if len(live) == 0 {
			return nil
		}
		var sb strings.Builder
		sb.Grow(len(sqlInsertIntentHead) + len(live)*len(sqlInsertIntentRow) + len(sqlInsertIntentTail))
		sb.WriteString(sqlInsertIntentHead)
		args := make([]any, 0, len(live)*insertIntentArgs)
		stamps := make([]string, len(ops))
		for n, i := range live {
			if n > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(sqlInsertIntentRow)
			op := ops[i]
			stamps[i] = wire.FormatTime(op.now)
			args = append(args, insertArgs(op.p, op.id, stamps[i], q.self)...)
		}
		sb.WriteString(sqlInsertIntentTail)
		rows, err := ex.QueryContext(ctx, sb.String(), args...)
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
			op := ops[i]
			if inserted[op.id] {
				results[i] = submitResult{insertedIntent(op.p, op.id, stamps[i], q.self), nil}
				continue
			}
			in, err := queuedIntent(ctx, ex, op.p)
			if err != nil && !errors.Is(err, ErrKeyReused) {
				return err
			}
			results[i] = submitResult{in, err}
		}
		return nil
	})
	for i, op := range ops {
		r := results[i]
		if err != nil && r.err == nil {
			r = submitResult{nil, err}
		}
		op.done <- r
	}
}
