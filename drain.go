package idemkit

import (
	"context"
	"time"
)

// Drain sends every due intent of this queue (as Run does, with Run's
// workers) and returns once nothing is left to send soon, or when ctx
// ends. Intents leased by a process on this host that died are taken over
// at once (see Config.LeaseDuration), before Drain looks at what is due. Nothing is left to send soon when no Run worker of this Client is
// busy and every pending intent this process may send is due later than
// both now plus Config.MaxSleep and ctx's deadline (if it has one): a long
// Retry-After, a persisted backoff, another process's lease. With no
// pending intent at all, it returns as soon as the last one ended. Short
// retries (waits up to MaxSleep) are waited out. Intents queued at another
// instance (see Client.Adopt) are not counted.
//
// It returns the number of intents in each state (as Counts) when it
// returns, and nil, or ctx's error if ctx ended first (attempts in flight
// are then canceled and their intents stay pending, as with Run), or
// ErrClosed if the Client was closed.
func (c *Client) Drain(ctx context.Context) (map[IntentState]int, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Leases of dead processes end now, before the first look at what is
	// due: their intents are due, not held for the rest of the lease.
	c.takeOver(ctx, "")
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	var err error
	for {
		ch := c.changedCh()
		c.takeOver(ctx, "") // a holder that died meanwhile
		c.progress(ctx, false)
		idle, derr := c.drained(ctx)
		if derr == nil && idle {
			c.progress(ctx, true)
			break
		}
		t := time.NewTimer(c.cfg.pollInterval)
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-c.closeCtx.Done():
			err = ErrClosed
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		if err != nil {
			break
		}
	}
	cancel()
	if rerr := <-done; rerr != nil && err == nil {
		err = rerr
	}
	counts, cerr := c.counts(context.WithoutCancel(ctx))
	if err == nil {
		err = cerr
	}
	return counts, err
}

// drained reports whether Drain may return: no Run worker busy, before
// and after reading the earliest due time (a claim in between would hide
// its intent), and that time beyond the limit.
func (c *Client) drained(ctx context.Context) (bool, error) {
	gen := c.claimGen.Load()
	if c.runActive.Load() != 0 {
		return false, nil
	}
	next, err := c.q.NextDue(ctx, c.limit.skipped())
	if err != nil {
		return false, err
	}
	if c.runActive.Load() != 0 || c.claimGen.Load() != gen {
		return false, nil
	}
	if next.IsZero() {
		return true, nil
	}
	now := c.now()
	limit := now.Add(c.cfg.MaxSleep)
	if dl, ok := ctx.Deadline(); ok {
		if d := now.Add(time.Until(dl)); d.After(limit) {
			limit = d
		}
	}
	return next.After(limit), nil
}
