package idemkit

import (
	"context"
	"fmt"

	"github.com/idemkit/idemkit/internal/wire"
)

// Resend puts an intent that ended [StateUnknown] or [StateFailed] back
// in the queue, pending and due now, under the SAME key: Run, Drain or Wait
// send it again, and the server settles it. If an earlier attempt took
// effect, the server answers from its idempotency store (a replay); if
// none did, it runs now, once. This is how an unknown outcome is
// reconciled once the cause of the last answer is fixed (a credential
// given again: see Config.SendHookFunc). A key the server no longer
// remembers cannot be resent safely: an intent past its horizon is refused
// (reconcile it with the API itself), and so is any other state. Returns
// ErrNotFound if no intent has that id.
func (c *Client) Resend(ctx context.Context, id string) (*Intent, error) {
	if c.closed() {
		return nil, ErrClosed
	}
	now := c.now()
	ok, err := c.q.Resend(ctx, id, now)
	if err != nil {
		return nil, err
	}
	in, err := c.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		if in.State == StateUnknown || in.State == StateFailed {
			return in, fmt.Errorf("idemkit: resend %s: its horizon %s has passed: the server may no longer remember the key, so resending it could take effect twice; reconcile it with the API", id, wire.FormatTime(in.Horizon))
		}
		return in, fmt.Errorf("idemkit: resend %s: intent is %s; only unknown and failed intents can be resent", id, in.State)
	}
	c.poke()
	c.broadcast()
	return in, nil
}
