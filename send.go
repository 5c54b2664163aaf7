package idemkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// stopKind is why the in-process retry loop of one claim ended.
type stopKind int

const (
	stopNone       stopKind = iota
	stopDefinitive          // a definitive response: succeeded or failed
	stopGiveUp              // the policy gave up with an error
	stopReschedule          // a wait longer than MaxSleep: persisted
	stopExpire              // no attempt may start before the horizon
	stopLeaseLost           // another process owns the intent now
	stopCanceled            // the caller's context ended
	stopQueueErr            // the queue could not be written
)

// drive is the state of one claim of one intent, shared by the
// go-retryablehttp hooks of its engine.
type drive struct {
	c    *Client
	in   *Intent
	host string
	// hookHost is the URL's host, as SendHookFunc and Config.Profiles
	// name it.
	hookHost string
	prof     *Profile // the host's dialect
	token    int64
	n        int // current attempt number
	retries  int
	first    time.Time
	win      time.Duration // effective window
	horizon  time.Time

	stop     stopKind
	stopErr  error
	next     time.Time
	wait     time.Duration
	attempt  *attemptResult // the last attempt, to be logged
	logged   int            // the number of the attempt last logged, 0 if none
	lastErr  string
	hookFail error

	// lastTry: the current attempt is the last Config.MaxAttempts allows.
	lastTry bool
	// yield: a Run worker, which persists a short wait instead of
	// sleeping when other intents are due before it ends (fairness).
	yield bool

	// The last response, as classified by checkRetry.
	body      []byte // read up to MaxBodySize+1 bytes
	keyReused bool
}

// plan returns the planFunc for a claim at now.
func (c *Client) plan(now time.Time) planFunc {
	return func(in *Intent, hostWindow time.Duration) time.Time {
		first := in.FirstAttemptAt
		if first.IsZero() {
			first = now
		}
		w := c.effectiveWindow(c.cfg.profileFor(in.URL), hostWindow)
		h := first.Add(w - c.margin(w))
		if !in.Horizon.IsZero() && in.Horizon.Before(h) {
			h = in.Horizon
		}
		return h
	}
}

// baseWindow is the window the client relies on for a host of prof: the
// profile's published window, else Config.Window.
func (c *Client) baseWindow(prof *Profile) time.Duration {
	if prof.Window > 0 {
		return prof.Window
	}
	return c.cfg.Window
}

// effectiveWindow is baseWindow, shortened to the Idempotency-Window the
// host advertised (0 if none).
func (c *Client) effectiveWindow(prof *Profile, hostWindow time.Duration) time.Duration {
	if base := c.baseWindow(prof); hostWindow <= 0 || hostWindow >= base {
		return base
	}
	return hostWindow
}

func (c *Client) margin(win time.Duration) time.Duration { return min(c.cfg.SafetyMargin, win/10) }

// lead is how long before the horizon a clamped last attempt starts.
func (d *drive) lead() time.Duration { return min(d.c.margin(d.win)/4, time.Second) }

// learn shortens the horizon to a window the server just advertised.
func (d *drive) learn(w time.Duration) {
	if w >= d.win {
		return
	}
	d.win = w
	if h := d.first.Add(w - d.c.margin(w)); h.Before(d.horizon) {
		d.horizon = h
	}
}

// driveID drives one intent to a terminal state. Close cancels it.
func (c *Client) driveID(ctx context.Context, id string) (*Intent, error) {
	return c.driveClaimed(ctx, id, nil)
}

// driveClaimed is driveID starting with a claim already taken (if first is
// not nil). Whatever ends it, it returns the intent as stored (or, if the
// queue cannot be read, as last known), so the caller has its id.
func (c *Client) driveClaimed(ctx context.Context, id string, first *claimed) (in *Intent, err error) {
	var last *Intent
	if first != nil {
		last = first.in
	}
	defer func() {
		if in != nil || errors.Is(err, ErrNotFound) {
			return
		}
		if got, gerr := c.q.get(context.WithoutCancel(ctx), id); gerr == nil {
			in = got
		} else {
			in = last
		}
	}()
	release := func() {
		if first != nil && !first.expired {
			// Nothing was sent: hand the claim back at once.
			now := c.now()
			_ = c.q.reschedule(context.WithoutCancel(ctx), id, first.token, now, now, time.Time{},
				&attemptResult{n: first.attempt, errText: "client closed"}, first.in.LastError, false)
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
		if first == nil && c.isExhausted(id) {
			in, _ := c.q.get(context.WithoutCancel(ctx), id)
			return in, ErrMaxAttempts
		}
		if first == nil {
			c.takeOver(ctx, id) // held by a dead process? then claim it now
			cl, err = c.q.claim(ctx, id, c.now(), c.cfg.LeaseDuration, c.plan(c.now()))
		}
		first = nil
		if err != nil {
			if ctx.Err() != nil {
				return c.pendingResult(ctx, id)
			}
			in, _ := c.q.get(context.WithoutCancel(ctx), id)
			return in, err
		}
		if cl != nil && cl.expired {
			c.ended(cl.in)
			return cl.in, result(cl.in)
		}
		if cl != nil {
			in, err := c.drive(ctx, cl)
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
		in, err := c.q.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if in.State != StatePending {
			return in, result(in)
		}
		if err := c.q.foreign(in); err != nil {
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
	in, _ := c.q.get(context.WithoutCancel(ctx), id)
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
		cl, err := c.q.claim(ctx, "", now, c.cfg.LeaseDuration, c.plan(now))
		if err != nil || cl == nil || cl.expired {
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
			c.idle(ctx)
			continue
		case cl.expired:
			c.ended(cl.in)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer c.runActive.Add(-1)
			if _, err := c.runDrive(ctx, cl); err != nil && !errors.Is(err, errLeaseLost) && ctx.Err() == nil {
				c.log.Warn("idemkit: drive failed", "intent", cl.in.ID, "error", err)
			}
		}()
	}
}

// idle waits for the next due time, a Submit in this process, the poll
// interval (other processes), or the end of ctx.
func (c *Client) idle(ctx context.Context) {
	d := c.cfg.pollInterval
	if next, err := c.q.nextDue(ctx); err == nil && !next.IsZero() {
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

// ended is called once an intent reached a terminal state in this process.
func (c *Client) ended(in *Intent) {
	c.forget(in.ID)
	c.broadcast()
	c.log.Info("idemkit: intent ended", "intent", in.ID, "key", in.Key, "state", in.State,
		"attempts", in.Attempts, "error", in.LastError)
	e := Event{Kind: EventEnded, IntentID: in.ID, Key: in.Key, URL: redact(in.URL), Attempt: in.Attempts,
		State: in.State, Reason: in.LastError}
	if in.Outcome != nil {
		e.Status, e.Replayed = in.Outcome.Status, in.Outcome.Replayed
	}
	c.emit(e)
}

// drive sends a claimed intent, retrying in-process while waits are short,
// and records the result. It returns the intent as stored afterwards. An
// errLeaseLost error means another process owns the intent now.
func (c *Client) drive(ctx context.Context, cl *claimed) (*Intent, error) {
	return c.driveAs(ctx, cl, false)
}

// runDrive is drive for a Run worker: it gives its slot up rather than
// sleep while other intents are due.
func (c *Client) runDrive(ctx context.Context, cl *claimed) (*Intent, error) {
	return c.driveAs(ctx, cl, true)
}

func (c *Client) driveAs(ctx context.Context, cl *claimed, yield bool) (*Intent, error) {
	in := cl.in
	// retries starts at the attempts already made, so the backoff keeps
	// growing across reschedules and restarts.
	d := &drive{c: c, in: in, token: cl.token, n: cl.attempt, retries: max(cl.attempt-1, 0),
		first: in.FirstAttemptAt, horizon: in.Horizon, yield: yield}
	d.host = hostOf(in.URL)
	d.prof = c.cfg.profileFor(in.URL)
	if u, err := url.Parse(in.URL); err == nil {
		d.hookHost = strings.ToLower(u.Host)
	}
	d.win = c.baseWindow(d.prof)
	if w := in.Horizon.Sub(in.FirstAttemptAt) + c.margin(d.win); w < d.win {
		d.win = max(w, time.Second)
	}
	wctx := context.WithoutCancel(ctx)

	var body any // nil, not an empty reader: no chunked encoding for an empty body
	if len(in.Body) > 0 {
		body = in.Body
	}
	rreq, err := retryablehttp.NewRequestWithContext(ctx, in.Method, in.URL, body)
	if err == nil {
		// Queued under another configuration, the key may not fit the
		// profile this process has for the host: never send it altered.
		err = d.prof.checkKey(in.Key)
	}
	if err != nil {
		// prepare() accepted it, so the stored row is bad.
		now := c.now()
		ferr := c.q.finish(wctx, in.ID, d.token, now, StateFailed, nil, "cannot build request: "+err.Error(),
			&attemptResult{n: d.n, errText: err.Error()})
		return c.after(wctx, in, ferr)
	}
	rreq.Header = in.Header.Clone()
	for k, v := range c.credsFor(in.ID) {
		rreq.Header[k] = v
	}
	rreq.Header.Set(d.prof.KeyHeader, d.prof.keyValue(in.Key))
	if err := d.sendHook(rreq.Request); err != nil {
		return c.afterHookFailure(wctx, d, err)
	}
	d.started()

	engine := c.engine(d)
	resp, doErr := engine.Do(rreq)
	now := c.now()
	if resp != nil && d.stop != stopDefinitive {
		drain(resp)
	}
	if d.hookFail != nil {
		return c.afterHookFailure(wctx, d, d.hookFail)
	}
	switch d.stop {
	case stopDefinitive:
		resp.Body.Close()
		body := d.body
		lastErr := ""
		if len(body) > MaxBodySize {
			body = body[:MaxBodySize]
			lastErr = "response body cut at MaxBodySize"
		}
		full := &Outcome{Status: resp.StatusCode, Header: resp.Header, Body: body, Replayed: d.attempt.replayed, keyReused: d.keyReused}
		o := c.cfg.keptOutcome(full, d.prof, true)
		state := StateSucceeded
		if resp.StatusCode < 200 || resp.StatusCode > 299 || d.keyReused {
			state = StateFailed
			if lastErr == "" {
				lastErr = describe(resp, nil)
			}
		}
		err := c.q.finish(wctx, in.ID, d.token, now, state, o, lastErr, d.attempt)
		got, err := c.after(wctx, in, err)
		if got != nil && got.Outcome != nil && c.cfg.OmitOutcomeBody {
			// Not on disk, but the caller of Do still gets the answer.
			got.Outcome = c.cfg.keptOutcome(full, d.prof, false)
		}
		return got, err
	case stopGiveUp:
		msg := "gave up: " + redactErr(d.stopErr)
		err := c.q.finish(wctx, in.ID, d.token, now, StateFailed, nil, msg, d.attempt)
		return c.after(wctx, in, err)
	case stopReschedule:
		err := c.q.reschedule(wctx, in.ID, d.token, now, d.next, d.horizon, d.attempt, d.lastErr, false)
		if err == nil {
			d.rescheduled(d.next, d.lastErr)
		}
		return c.after(wctx, in, err)
	case stopExpire:
		msg := "horizon " + formatTime(d.horizon) + " reached without a definitive answer"
		if d.lastErr != "" {
			msg += "; last error: " + d.lastErr
		}
		err := c.q.finish(wctx, in.ID, d.token, now, StateExpired, nil, msg, d.attempt)
		return c.after(wctx, in, err)
	case stopLeaseLost:
		return nil, errLeaseLost
	case stopQueueErr:
		return nil, d.stopErr
	case stopCanceled:
		// Release the lease so the intent can be resumed at once.
		a := d.attempt
		if a == nil {
			a = &attemptResult{n: d.n}
		}
		if a.errText == "" {
			a.errText = "canceled: " + ctx.Err().Error()
		}
		// The stored last error stays that of the last real attempt: a
		// stop is not what went wrong with the intent.
		_ = c.q.reschedule(wctx, in.ID, d.token, now, now, d.horizon, a, d.keptError(), false)
		return nil, ctx.Err()
	}
	// The engine stopped for a reason of its own (it could not rewind the
	// body, say): treat it as a failed attempt.
	msg := "attempt failed"
	if doErr != nil {
		msg = redactErr(doErr)
	}
	a := &attemptResult{n: d.n, errText: msg}
	if d.logged == d.n {
		// Stopped during the wait after attempt n, which is logged already
		// (with its status): no attempt of its own to log.
		a = nil
	}
	if ctx.Err() != nil {
		_ = c.q.reschedule(wctx, in.ID, d.token, now, now, d.horizon, a, d.keptError(), false)
		return nil, ctx.Err()
	}
	next := now.Add(c.cfg.Backoff(BackoffBaseDefault, BackoffCapDefault, d.retries, nil))
	err = c.q.reschedule(wctx, in.ID, d.token, now, next, d.horizon, a, msg, false)
	if err == nil {
		d.rescheduled(next, msg)
	}
	return c.after(wctx, in, err)
}

// after re-reads the intent once its claim is over, and announces its end.
// When the queue write (err) or the read fails, it returns the intent as
// it was claimed, with the error: the caller still has its id.
func (c *Client) after(ctx context.Context, claimed *Intent, err error) (*Intent, error) {
	if err != nil {
		return claimed, err
	}
	in, err := c.q.get(ctx, claimed.ID)
	if err != nil {
		return claimed, err
	}
	if in.State != StatePending {
		c.ended(in)
	}
	return in, nil
}

func (c *Client) afterHookFailure(ctx context.Context, d *drive, herr error) (*Intent, error) {
	now := c.now()
	msg := "send hook: " + herr.Error()
	next := now.Add(c.cfg.Backoff(BackoffBaseDefault, BackoffCapDefault, d.retries, nil))
	if next.After(d.horizon) {
		err := c.q.finish(ctx, d.in.ID, d.token, now, StateExpired, nil, msg, &attemptResult{n: d.n, errText: msg})
		return c.after(ctx, d.in, err)
	}
	err := c.q.reschedule(ctx, d.in.ID, d.token, now, next, d.horizon, &attemptResult{n: d.n, errText: msg}, msg, false)
	if err == nil {
		d.rescheduled(next, msg)
	}
	return c.after(ctx, d.in, err)
}

// keptError is the last error to store when a claim stops without an
// attempt error of its own: that of the last real attempt.
func (d *drive) keptError() string {
	if d.lastErr != "" {
		return d.lastErr
	}
	return d.in.LastError
}

func (d *drive) sendHook(r *http.Request) error {
	if d.c.cfg.SendHookFunc == nil {
		return nil
	}
	return d.c.cfg.SendHookFunc(d.hookHost, r)
}

// errStop ends the engine's loop from PrepareRetry; the reason is in
// drive.stop.
var errStop = errors.New("idemkit: stop")

// engine returns a go-retryablehttp client for one claim: the caller's
// transport and log hooks, with the SDK's policy wired into CheckRetry,
// Backoff and PrepareRetry.
func (c *Client) engine(d *drive) *retryablehttp.Client {
	e := &retryablehttp.Client{
		HTTPClient:   c.httpc,
		RetryWaitMin: BackoffBaseDefault,
		RetryWaitMax: BackoffCapDefault,
		RetryMax:     math.MaxInt32, // the horizon ends the loop, not a count
		CheckRetry:   d.checkRetry,
		Backoff:      func(time.Duration, time.Duration, int, *http.Response) time.Duration { return d.wait },
		PrepareRetry: d.prepareRetry,
		ErrorHandler: func(resp *http.Response, err error, _ int) (*http.Response, error) { return resp, err },
	}
	if base := c.cfg.HTTPClient; base != nil {
		e.Logger = base.Logger
		e.RequestLogHook = base.RequestLogHook
		e.ResponseLogHook = base.ResponseLogHook
	}
	return e
}

// checkRetry runs after every attempt: it logs the attempt, learns the
// server's window, and decides between a definitive answer, a short
// in-process wait, a persisted long wait and expiry.
func (d *drive) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	c := d.c
	now := c.now()
	a := &attemptResult{n: d.n, host: d.host}
	d.body, d.keyReused = nil, false
	dec := decision{verdict: verdictPolicy}
	if resp != nil && err == nil {
		// Read the answer here: the profile may look into it, and a
		// definitive one is stored. An answer cut off is no answer.
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxBodySize+1))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			resp, err = nil, fmt.Errorf("reading response body: %w", rerr)
		} else {
			d.body = body
			a.status = resp.StatusCode
			if w, ok := parseWindow(resp.Header); ok {
				a.learned = w
				d.learn(w)
			}
			dec = classify(d.prof, resp.StatusCode, resp.Header, body)
			a.replayed = dec.replayed
			c.emit(Event{Kind: EventAnswered, IntentID: d.in.ID, Key: d.in.Key, URL: redact(d.in.URL), Attempt: d.n,
				Status: resp.StatusCode, Replayed: dec.replayed, At: now})
			if s := resp.StatusCode; s < 500 && s != http.StatusTooManyRequests {
				// The host answers: those waiting for it need not.
				c.wakeHost(context.WithoutCancel(ctx), d.host, d.in.ID, now)
			}
		}
	}
	if err != nil {
		a.errText = redactErr(err)
	}
	d.attempt = a
	var retry bool
	var perr error
	switch dec.verdict {
	case verdictFinal, verdictKeyReused:
		d.keyReused = dec.verdict == verdictKeyReused
	case verdictRetry:
		retry = true
	default:
		retry, perr = c.cfg.CheckRetry(ctx, resp, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		d.stop = stopCanceled
		return false, cerr
	}
	if !retry {
		switch {
		case perr != nil:
			d.stop, d.stopErr = stopGiveUp, perr
			return false, perr
		case resp == nil:
			d.stop, d.stopErr = stopGiveUp, err
			return false, err
		}
		d.stop = stopDefinitive
		return false, nil
	}
	d.lastErr = describe(resp, err)
	backoff := c.cfg.Backoff(BackoffBaseDefault, BackoffCapDefault, d.retries, resp)
	d.retries++
	serverWait, has := retryAfter(resp, now)
	next, ok := schedule(now, d.horizon, backoff, serverWait, has, dec.minWait, d.lead())
	unanswered := resp == nil
	probe, handoff := false, false
	if ok && unanswered {
		var capped time.Time
		capped, handoff = d.noAnswer(context.WithoutCancel(ctx), now, next)
		probe = capped.Before(next)
		next = capped
	}
	if ok {
		// The attempt budget: at most MaxAttemptsPerHour in any hour.
		oldest, berr := c.q.nthLastAttempt(context.WithoutCancel(ctx), d.in.ID, c.cfg.MaxAttemptsPerHour)
		if berr != nil {
			d.stop, d.stopErr = stopQueueErr, berr
			return false, berr
		}
		if allowed := oldest.Add(time.Hour); !oldest.IsZero() && allowed.After(next) {
			next = allowed
			d.lastErr += fmt.Sprintf("; %d attempts in the last hour (Config.MaxAttemptsPerHour)", c.cfg.MaxAttemptsPerHour)
			ok = !next.After(d.horizon)
		}
	}
	persist := ok && (d.lastTry || next.Sub(now) > c.cfg.MaxSleep || (unanswered && next.Sub(now) > probeInterval) ||
		(d.yield && c.othersDue(ctx, next)))
	if ok && unanswered {
		c.probes.planned(d.host, d.in.ID, now, next, persist)
		if handoff || (probe && next.After(now.Add(probeInterval))) {
			// Its attempt budget is spent: another intent probes.
			at := now.Add(probeInterval)
			if other := c.probes.handoff(d.host, d.in.ID, at); other != "" {
				_ = c.q.makeDueBy(context.WithoutCancel(ctx), other, at)
			}
		}
	}
	switch {
	case !ok:
		d.stop = stopExpire
		return false, nil
	case persist:
		if d.lastTry {
			c.exhaust(d.in.ID) // pending; this Client claims it no more
		}
		// A long wait is written to the queue; so is a short one of a Run
		// worker while other intents are due before it ends (they get
		// the slot, this one goes behind them: oldest due first), and
		// any wait but a probe's for a host that did not answer (its
		// answer to another intent makes this one due at once).
		d.stop, d.next = stopReschedule, next
		return false, nil
	}
	// Sleep in-process: log the attempt and hold the lease over the sleep.
	werr := c.q.reschedule(context.WithoutCancel(ctx), d.in.ID, d.token, now, next.Add(c.cfg.LeaseDuration), d.horizon, a, d.lastErr, true)
	if werr != nil {
		d.stop, d.stopErr = stopQueueErr, werr
		if errors.Is(werr, errLeaseLost) {
			d.stop = stopLeaseLost
		}
		return false, werr
	}
	d.attempt, d.logged = nil, d.n
	d.wait = next.Sub(now)
	c.log.Debug("idemkit: retrying", "intent", d.in.ID, "attempt", d.n, "wait", d.wait, "reason", d.lastErr)
	c.emit(Event{Kind: EventRetrying, IntentID: d.in.ID, Key: d.in.Key, URL: redact(d.in.URL), Attempt: d.n,
		Reason: d.lastErr, Wait: d.wait, At: now})
	return true, nil
}

// othersDue reports whether another intent of this instance is due by
// next (the claimed one is not: its due time is its lease's end).
func (c *Client) othersDue(ctx context.Context, next time.Time) bool {
	due, err := c.q.nextDue(context.WithoutCancel(ctx))
	return err == nil && !due.IsZero() && !due.After(next)
}

// prepareRetry runs before every retry: it refuses to start one past the
// horizon, starts the attempt in the queue (renewing the lease, checking the
// fencing token) and calls the send hook.
func (d *drive) prepareRetry(r *http.Request) error {
	c := d.c
	now := c.now()
	if now.After(d.horizon) {
		d.stop = stopExpire
		return errStop
	}
	ctx := context.WithoutCancel(r.Context())
	n, h, err := c.q.startAttempt(ctx, d.in.ID, d.token, now, d.horizon, now.Add(c.cfg.LeaseDuration))
	if err != nil {
		d.stop, d.stopErr = stopQueueErr, err
		if errors.Is(err, errLeaseLost) {
			d.stop = stopLeaseLost
		}
		return err
	}
	d.n, d.horizon, d.stop = n, h, stopNone
	r.Header = r.Header.Clone()
	if err := d.sendHook(r); err != nil {
		d.hookFail = err
		return err
	}
	d.started()
	return nil
}

// started announces the attempt d.n.
func (d *drive) started() {
	d.lastTry = d.c.tried(d.in.ID)
	d.c.log.Debug("idemkit: attempt", "intent", d.in.ID, "key", d.in.Key, "attempt", d.n, "url", redact(d.in.URL))
	d.c.emit(Event{Kind: EventAttemptStarted, IntentID: d.in.ID, Key: d.in.Key, URL: redact(d.in.URL), Attempt: d.n})
}

// rescheduled announces a wait written to the queue.
func (d *drive) rescheduled(next time.Time, reason string) {
	d.c.log.Debug("idemkit: rescheduled", "intent", d.in.ID, "next", next, "reason", reason)
	d.c.emit(Event{Kind: EventRescheduled, IntentID: d.in.ID, Key: d.in.Key, URL: redact(d.in.URL), Attempt: d.n, Next: next, Reason: reason})
}

func describe(resp *http.Response, err error) string {
	if err != nil {
		return redactErr(err)
	}
	if resp == nil {
		return ""
	}
	msg := fmt.Sprintf("status %d", resp.StatusCode)
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		msg += " (Retry-After: " + ra + ")"
	}
	return msg
}

// redactErr strips URLs (which may carry secrets in their query) from
// transport errors.
func redactErr(err error) string {
	if err == nil {
		return ""
	}
	var ue interface {
		Unwrap() error
		Timeout() bool
	}
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}
