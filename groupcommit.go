package idemkit

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/internal/queue"
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
			c.insertBatch(batch)
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
	n    *queue.NewIntent
	done chan submitResult
}

type submitResult struct {
	in  *Intent
	err error
}

// insertBatch inserts every op in one transaction (queue.InsertBatch): one
// fsync for all of them, and answers each.
func (c *Client) insertBatch(ops []*submitOp) {
	ctxs := make([]context.Context, len(ops))
	ns := make([]*queue.NewIntent, len(ops))
	for i, op := range ops {
		ctxs[i], ns[i] = op.ctx, op.n
	}
	for i, r := range c.q.InsertBatch(context.Background(), ctxs, ns) {
		ops[i].done <- submitResult{intentOf(r.Intent), r.Err}
	}
}
