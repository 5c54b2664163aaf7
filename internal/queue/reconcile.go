package queue

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// sqlReconcile ends an intent that is still in the state its lookup read
// (?8: unknown or expired, never pending: no process holds it) with what
// the server's idempotency record said.
const sqlReconcile = `UPDATE idemkit_intents SET
		state = ?1, outcome_status = ?2, outcome_header = ?3, outcome_body = ?4, outcome_replayed = 1,
		outcome_key_reused = 0, last_error = ?5, updated_at = ?6, next_attempt_at = ?6
	WHERE id = ?7 AND state = ?8 AND state IN ('unknown', 'expired')`

// Reconcile ends intent id, still unknown or expired (from), in state with
// o, the response the server's idempotency record holds, as its outcome
// (unknown or expired → succeeded or failed). It reports whether it did
// (false: another process resent, canceled or reconciled it meanwhile, and
// nothing was written).
func (q *Queue) Reconcile(ctx context.Context, id string, from, state State, o *Outcome, lastErr string, now time.Time) (bool, error) {
	var ok bool
	err := q.InTx(ctx, func(ex execer) error {
		body := o.Body
		if body == nil {
			body = []byte{}
		}
		res, err := ex.ExecContext(ctx, sqlReconcile, string(state), o.Status, wire.EncodeHeader(o.Header), body,
			lastErr, wire.FormatTime(now), id, string(from))
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	return ok, err
}
