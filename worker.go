package idemkit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idemkit/internal/queue"
)

// Workers: how Do and Run get intents to their send loop (send.go): claims,
// and waits for intents another process holds or that are not due yet.

// driveID drives one intent to a terminal state. Close cancels it.
func (c *Client) driveID(ctx context.Context, id string) (*Intent, error) {
	return c.driveClaimed(ctx, id, nil)
}

// driveClaimed is driveID starting with a claim already taken (if first is
// not nil). Whatever ends it, it returns the intent as stored (or, if the
// queue cannot be read, as last known), so the caller has its id.
func (c *Client) driveClaimed(ctx context.Context, id string, first *queue.Claimed) (in *Intent, err error) {
	var last *Intent
	if first != nil {
		last = intentOf(first.Intent)
	}
	defer func() {
		if in != nil || errors.Is(err, ErrNotFound) {
			return
		}
		if got, gerr := c.get(context.WithoutCancel(ctx), id); gerr == nil {
			in = got
		} else {
			in = last
		}
	}()
	release := func() {
		if first != nil && !first.Expired {
			// Nothing was sent: hand the claim back at once.
			now := c.now()
			_, _ = c.q.Apply(context.WithoutCancel(ctx), first.Lease, now, queue.Change{State: queue.Pending, Due: now,
				Attempt: &queue.AttemptLog{N: first.Attempt, Error: "client closed", NotSent: true}, LastError: first.Intent.LastError})
		}
	}
	if !c.enter() {
		release()
		return nil, ErrClosed
	}
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.closeCtx, cancel)
	defer stop()
	for {
		if c.closed() {
			release()
			return nil, ErrClosed
		}
		ch := c.changedCh()
		cl, err := first, error(nil)
		if first == nil && c.limit.isExhausted(id) {
			in, _ := c.get(context.WithoutCancel(ctx), id)
			return in, &resultError{state: StatePending, in: in, cause: errMaxAttempts}
		}
		if first == nil {
			c.takeOver(ctx, id) // held by a dead process? then claim it now
			cl, err = c.q.Claim(ctx, id, c.now(), c.cfg.LeaseDuration, nil)
		}
		first = nil
		if err != nil {
			if ctx.Err() != nil {
				return c.pendingResult(ctx, id)
			}
			in, _ := c.get(context.WithoutCancel(ctx), id)
			return in, err
		}
		if cl != nil && cl.Expired {
			in := intentOf(cl.Intent)
			c.ended(in)
			return in, result(in)
		}
		if cl != nil {
			in, err := c.send(ctx, cl, false)
			switch {
			case err == nil && in.State != StatePending:
				return in, result(in)
			case ctx.Err() != nil:
				return c.pendingResult(ctx, id)
			case err != nil && !errors.Is(err, errLeaseLost):
				return in, err
			}
			continue // rescheduled, or taken over: look again
		}
		in, err := c.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if in.State != StatePending {
			return in, result(in)
		}
		if err := c.q.Foreign(in.queued()); err != nil {
			return in, err
		}
		if err := c.sleepUntil(ctx, in.NextAttemptAt, ch); err != nil {
			return c.pendingResult(ctx, id)
		}
	}
}

// pendingResult is Do's answer when ctx ended: the intent as stored, and
// ctx's error.
func (c *Client) pendingResult(ctx context.Context, id string) (*Intent, error) {
	in, _ := c.get(context.WithoutCancel(ctx), id)
	if c.closed() {
		return in, ErrClosed
	}
	if ctx.Err() == nil {
		return in, ErrClosed
	}
	return in, ctx.Err()
}

// Run sends due intents, Config.Concurrency at a time, oldest due first,
// until ctx ends or the Client is closed. A worker whose intent must wait
// before its next attempt sleeps in-process (up to Config.MaxSleep) only
// while no other intent is due before that: otherwise the wait is written
// to the queue and the worker takes the next due intent, so every due
// intent gets attempts, not only the first Concurrency. When ctx ends or
// the Client is closed, it cancels the attempts in flight (their
// intents stay pending and are resumed later, by any process) and returns
// nil. It keeps going through network and server outages: every intent is
// retried until it ends or its horizon passes. Errors reading the queue
// are logged and retried; Run returns an error only if the Client was
// already closed.
func (c *Client) Run(ctx context.Context) error {
	if !c.enter() {
		return ErrClosed
	}
	defer c.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.closeCtx, cancel)
	defer stop()

	sem := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c.takeOver(ctx, "") // leases of dead processes become due now
		now := c.now()
		c.runActive.Add(1) // before the claim: Drain must not see a gap
		cl, err := c.q.Claim(ctx, "", now, c.cfg.LeaseDuration, c.limit.skipped())
		if err != nil || cl == nil || cl.Expired {
			c.runActive.Add(-1)
			<-sem
		} else {
			c.claimGen.Add(1)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			c.log.Warn("idemkit: claim failed", "error", err)
			_ = c.sleepUntil(ctx, now.Add(c.cfg.pollInterval), nil)
			continue
		case cl == nil:
			c.progress(ctx, false)
			c.idle(ctx)
			continue
		case cl.Expired:
			c.ended(intentOf(cl.Intent))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer c.runActive.Add(-1)
			if _, err := c.send(ctx, cl, true); err != nil && !errors.Is(err, errLeaseLost) && ctx.Err() == nil {
				c.log.Warn("idemkit: drive failed", "intent", cl.Intent.ID, "error", err)
			}
			c.progress(ctx, false)
		}()
	}
}

// idle waits for the next due time, a Submit in this process, the poll
// interval (other processes), or the end of ctx.
func (c *Client) idle(ctx context.Context) {
	d := c.cfg.pollInterval
	if next, err := c.q.NextDue(ctx, c.limit.skipped()); err == nil && !next.IsZero() {
		if w := next.Sub(c.now()); w < d {
			d = max(w, time.Millisecond)
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-c.wake:
	case <-t.C:
	}
}

// sleepUntil waits until t (at most the poll interval), a change in this
// process, or the end of ctx.
func (c *Client) sleepUntil(ctx context.Context, t time.Time, ch <-chan struct{}) error {
	d := c.cfg.pollInterval
	if w := t.Sub(c.now()); w < d {
		d = max(w, time.Millisecond)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closeCtx.Done():
		return ErrClosed
	case <-ch:
	case <-timer.C:
	}
	return nil
}
