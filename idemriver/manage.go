package idemriver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// ErrNotResendable is returned by Resend for an intent it may not put back:
// not unknown or failed, or past its horizon (the server may have forgotten
// the key: reconcile with the API itself). ErrNotCancelable is returned by
// Cancel for an intent that already ended.
var (
	ErrNotResendable = errors.New("idemriver: intent cannot be resent")
	ErrNotCancelable = errors.New("idemriver: intent already ended")
)

// Resend puts an intent that ended StateUnknown or StateFailed back in the
// queue, due now, under the SAME key, as idemkit.Client.Resend does: a
// started Client sends it again and the server settles it (a replay if an
// earlier attempt took effect, else it runs now, once). This is how an
// unknown outcome is reconciled once the cause of the last answer is fixed
// (a credential the send hook now supplies). Its previous outcome is
// cleared. Returns ErrNotFound if no intent has that id, and
// ErrNotResendable for any other state or an intent past its horizon.
func (c *Client) Resend(ctx context.Context, id string) (*Intent, error) {
	in, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case in.State != StateUnknown && in.State != StateFailed:
		return nil, fmt.Errorf("%w: intent %s is %s (only unknown and failed intents are resent)", ErrNotResendable, id, in.State)
	case !in.Horizon.IsZero() && time.Now().After(in.Horizon):
		return nil, fmt.Errorf("%w: intent %s is past its horizon %v: the server may have forgotten its key; reconcile with the API", ErrNotResendable, id, in.Horizon)
	}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+c.jobTable+`
			SET metadata = jsonb_set(metadata - 'output', '{`+progressKey+`}', (metadata->'`+progressKey+`') - 'state')
			WHERE id = $1 AND state IN ('completed', 'cancelled', 'discarded')`, in.JobID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: intent %s changed meanwhile", ErrNotResendable, id)
		}
		_, err = c.river.JobRetryTx(ctx, tx, in.JobID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("idemriver: resend %s: %w", id, err)
	}
	return c.Get(ctx, id)
}

// Cancel ends a pending intent as canceled so that it is never sent again
// (River's JobCancel: an attempt on the wire is canceled, but its effect may
// still happen). Returns ErrNotFound if no intent has that id, and
// ErrNotCancelable if it already ended.
func (c *Client) Cancel(ctx context.Context, id string) error {
	in, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if in.State.terminal() {
		return fmt.Errorf("%w: intent %s is %s", ErrNotCancelable, id, in.State)
	}
	if _, err := c.river.JobCancel(ctx, in.JobID); err != nil {
		if errors.Is(err, rivertype.ErrNotFound) {
			return ErrNotFound
		}
		return fmt.Errorf("idemriver: cancel %s: %w", id, err)
	}
	return nil
}
