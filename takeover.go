package idemkit

import (
	"context"
	"strconv"
)

// Taking over at once the leases of processes that died: a process
// SIGKILLed mid-request leaves its intent leased for up to
// Config.LeaseDuration; another process on the same host can see that the
// holder is gone and need not wait.

// takeOver expires the live leases that dead processes on this host hold
// (on the intent id, or on any intent when id is empty), so that the next
// claim takes them over at once, with a new fencing token, instead of
// waiting for them to run out. Leases of live processes, of other hosts and
// of this process are never touched; neither are leases whose holder cannot
// be checked (older clients, other OSes): those run out as before. Errors
// are logged, not returned: the leases then simply run out.
func (c *Client) takeOver(ctx context.Context, id string) {
	if !takeoverSupported || c.self.Host == "" {
		return
	}
	now := c.now()
	dead, err := c.q.DeadLeases(ctx, c.self, id, now, func(o leaseOwner, raw string) (bool, string) {
		gone, why := processGone(o.PID, o.Start)
		if !gone {
			c.log.Debug("idemkit: lease holder is alive", "owner", raw, "pid", o.PID)
		}
		return gone, why
	})
	if err == nil && len(dead) > 0 {
		dead, err = c.q.ExpireLeases(ctx, now, dead)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("idemkit: looking for leases of dead processes failed", "error", err)
		}
		return
	}
	for _, l := range dead {
		c.log.Info("idemkit: taking over intent of dead process pid "+strconv.Itoa(l.Owner.PID),
			"intent", logID(l.ID, l.Key), "pid", l.Owner.PID, "owner", l.Raw, "token", l.Token, "reason", l.Why)
	}
	if len(dead) > 0 {
		c.poke()
	}
}

// logID names an intent in logs at INFO and above without its key in
// clear: its id, or, when the id is the key (minted), "…" and its last 8
// characters (the short id the CLI prints).
func logID(id, key string) string {
	if id != key {
		return id
	}
	return "…" + id[max(0, len(id)-8):]
}
