package idemkit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/queue"
)

// sending is one claim of one intent, as the send loop drives it.
type sending struct {
	c  *Client
	in *Intent
	l  queue.Lease
	// n is the number of the current attempt, started in the queue.
	n int
	// retries counts the waits so far, from the attempts already made, so
	// that the backoff keeps growing across reschedules and restarts.
	retries int
	hz      policy.Horizon
	// budget is the attempt budget as of the current attempt.
	budget policy.Budget
	prof   *Profile // the host's dialect
	// host is scheme://host, as the probes and idemkit_hosts name it;
	// hookHost the URL's host, as SendHookFunc and Config.Profiles do.
	host, hookHost string
	// yield: a Run worker, which writes a short wait to the queue instead
	// of sleeping when other intents are due before it ends (fairness).
	yield bool
	// lastTry: the current attempt is the last Config.MaxAttempts allows.
	lastTry bool
	// lastErr is the intent's last error, as the last attempt left it.
	lastErr string
	// unanswered is the first attempt whose answer was lost although it
	// may have been sent (0: none): see policy.Decide.
	unanswered int
}

// send drives a claimed intent in a straight line: the attempt the claim
// started; what the policy makes of its result (policy.Decide, pure); one
// queue call that applies the decision (queue.Apply); the events of the
// applied result. Then it returns (a definitive answer, the horizon
// reached, a wait written to the queue, ctx ended) or sleeps in-process,
// holding the lease, and starts the next attempt. It returns the intent as
// stored afterwards. An errLeaseLost error means another process owns the
// intent now.
//
// yield is set for a Run worker: it gives its slot up rather than sleep
// while other intents are due.
func (c *Client) send(ctx context.Context, cl *queue.Claimed, yield bool) (*Intent, error) {
	in := intentOf(cl.Intent)
	s := &sending{c: c, in: in, l: cl.Lease, n: cl.Attempt, retries: max(cl.Attempt-1, 0),
		hz: cl.Horizon, budget: cl.Budget, prof: c.cfg.profileFor(in.URL), host: hostOf(in.URL), yield: yield,
		unanswered: in.Unanswered}
	if u, err := url.Parse(in.URL); err == nil {
		s.hookHost = strings.ToLower(u.Host)
	}
	wctx := context.WithoutCancel(ctx) // what the queue records outlives ctx
	for {
		// Attempt.
		f, handoff := s.attempt(ctx)

		// Decide.
		d := policy.Decide(ctx, f)
		sent := f.Unsendable == nil && f.Skipped == nil
		var wake []string
		if sent && f.Resp != nil {
			wake = s.answered(f.Now, d)
		}

		// Apply.
		ch := queue.Change{Attempt: s.logged(f, d), State: queue.State(d.Kind.State()), LastError: d.Reason, Wake: wake}
		var full *Outcome // the answer as Do returns it
		persist := true
		switch {
		case sent && ctx.Err() != nil:
			// Canceled: the lease is released so that the intent can be
			// resumed at once. Its last error stays that of the last real
			// attempt: a stop is not what went wrong with the intent.
			if ch.Attempt.Error == "" {
				ch.Attempt.Error = "canceled: " + ctx.Err().Error()
			}
			ch.State, ch.Due, ch.LastError = queue.Pending, c.now(), s.lastErr
			if ch.LastError == "" {
				ch.LastError = s.in.LastError
			}
			s.apply(wctx, ch)
			return nil, ctx.Err()
		case d.Kind == policy.Retry && !sent:
			ch.Due = d.At
		case d.Kind == policy.Retry:
			s.hz, s.unanswered, s.retries, s.lastErr = d.Horizon, d.Unanswered, d.Retries, d.Reason
			ch.Due = d.At
			persist = s.persist(ctx, f.Now, d, f.Resp == nil, handoff, &ch)
			if !persist {
				ch.LeasedUntil = d.At.Add(c.cfg.LeaseDuration) // held over the sleep
			}
		case d.Answered:
			full, ch.Outcome = s.outcome(f, d)
		}
		if err := s.apply(wctx, ch); err != nil {
			if persist {
				return c.after(wctx, s.in, err)
			}
			return nil, err
		}

		// Events of the applied result, and what comes next.
		switch {
		case d.Kind != policy.Retry:
			got, err := c.after(wctx, s.in, nil)
			if full != nil && got != nil && got.Outcome != nil && c.cfg.OmitOutcomeBody {
				// Not on disk, but the caller of Do still gets the answer.
				got.Outcome = c.cfg.keptOutcome(full, s.prof, false)
			}
			return got, err
		case persist:
			s.rescheduled(d.At, d.Reason)
			return c.after(wctx, s.in, nil)
		}
		if err := s.sleep(ctx, f.Now, d.At); err != nil {
			// Canceled during the sleep: the attempt is logged already.
			s.apply(wctx, queue.Change{State: queue.Pending, Due: c.now(), LastError: s.lastErr})
			return nil, ctx.Err()
		}

		// The next attempt, under the same lease: never past the horizon.
		now := c.now()
		if now.After(s.hz.At) {
			err := s.apply(wctx, queue.Change{State: queue.Expired, LastError: policy.ExpiredReason(s.hz.At, s.lastErr)})
			return c.after(wctx, s.in, err)
		}
		n, h, b, err := c.q.StartAttempt(wctx, s.l, now, s.hz.At, now.Add(c.cfg.LeaseDuration))
		if err != nil {
			return nil, err
		}
		s.n, s.hz.At, s.budget = n, h, b
	}
}

// apply writes change ch of the intent to the queue in one call, and
// announces the intents it made due.
func (s *sending) apply(ctx context.Context, ch queue.Change) error {
	c := s.c
	applied, err := c.q.Apply(ctx, s.l, c.now(), ch)
	if err != nil && len(ch.Wake) > 0 && errors.Is(err, errLeaseLost) {
		// This intent is another's now; those waiting for its host are
		// still due.
		applied.Woken, _ = c.q.MakeDue(ctx, ch.Wake, c.now())
	}
	if applied.Woken > 0 {
		c.log.Debug("idemkit: the intents waiting for the host are due now", "host", s.host, "intents", applied.Woken)
		c.poke()
		c.broadcast()
	}
	return err
}

// attempt makes attempt s.n and returns its facts for policy.Decide: the
// request could not be built (Unsendable), the send hook refused it
// (Skipped), or it was sent and got an answer or a transport error. After
// a transport error, handoff reports that the intent spent its probing
// budget (see noAnswer).
func (s *sending) attempt(ctx context.Context) (f policy.Facts, handoff bool) {
	f = policy.Facts{Attempt: s.n, Retries: s.retries, Profile: s.prof, CheckRetry: s.c.cfg.CheckRetry,
		Backoff: s.c.cfg.Backoff, Unanswered: s.unanswered, Horizon: s.hz, Budget: s.budget}
	req, rerr := s.request(ctx)
	switch {
	case rerr != nil:
		f.Unsendable = rerr // prepare() accepted it, so the stored row is bad
	case s.c.cfg.SendHookFunc != nil:
		f.Skipped = s.c.cfg.SendHookFunc(s.hookHost, req)
	}
	if f.Unsendable != nil || f.Skipped != nil {
		f.Now = s.c.now()
		return f, false
	}
	s.started()
	f.Resp, f.Body, f.Err = policy.Send(s.c.httpc, req)
	f.Now = s.c.now()
	if f.Err != nil {
		f.Probe, handoff = s.c.noAnswer(context.WithoutCancel(ctx), s.host, s.in.ID, f.Now)
	}
	return f, handoff
}

// logged is the attempt log entry of attempt f under decision d.
func (s *sending) logged(f policy.Facts, d policy.Decision) *queue.AttemptLog {
	a := &queue.AttemptLog{N: s.n, Status: d.Status, Error: d.AttemptError, NotSent: d.NotSent, Replayed: d.Replayed}
	if f.Unsendable == nil && f.Skipped == nil {
		a.Host = s.host
	}
	if d.Learned > 0 {
		a.Learned, a.Horizon = d.Learned, d.Horizon.At
	}
	return a
}

// outcome is the answer of attempt f as Do returns it (full) and as the
// queue stores it (kept: Config.OutcomeHeaders, Config.OmitOutcomeBody).
func (s *sending) outcome(f policy.Facts, d policy.Decision) (full *Outcome, kept *queue.Outcome) {
	body := f.Body
	if len(body) > maxBodySize {
		body = body[:maxBodySize]
	}
	full = &Outcome{Status: f.Resp.StatusCode, Header: f.Resp.Header, Body: body, Replayed: d.Replayed,
		keyReused: d.Kind == policy.KeyReused}
	return full, storedOutcome(s.c.cfg.keptOutcome(full, s.prof, true))
}

// request builds the request of one attempt: the stored request, the
// credential headers this process holds, and the key in the profile's
// header. Queued under another configuration, the key may not fit the
// profile this process has for the host: it is never sent altered.
func (s *sending) request(ctx context.Context) (*http.Request, error) {
	if err := policy.CheckKey(s.prof, s.in.Key, s.in.keyForm == "quoted"); err != nil {
		return nil, err
	}
	var body io.Reader // nil, not an empty reader: no chunked encoding for an empty body
	if len(s.in.Body) > 0 {
		body = bytes.NewReader(s.in.Body)
	}
	r, err := http.NewRequestWithContext(ctx, s.in.Method, s.in.URL, body)
	if err != nil {
		return nil, err
	}
	r.Header = s.in.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	for k, v := range s.c.credsFor(s.in.ID) {
		r.Header[k] = v
	}
	r.Header.Set(s.prof.KeyHeader, policy.KeyValue(s.in.Key, s.in.keyForm == "quoted"))
	return r, nil
}

// sleep waits in-process until next, or until ctx ends (its error).
func (s *sending) sleep(ctx context.Context, now, next time.Time) error {
	d := next.Sub(now)
	s.c.log.Debug("idemkit: retrying", "intent", s.in.ID, "attempt", s.n, "wait", d, "reason", s.lastErr)
	s.c.emit(Event{Kind: EventRetrying, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Attempt: s.n,
		Reason: s.lastErr, Wait: d, Next: next, At: now})
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// answered announces an answer to attempt s.n, and returns the intents
// waiting for its host, which need not wait any longer (they are made due
// with the decision).
func (s *sending) answered(now time.Time, d policy.Decision) []string {
	s.c.emit(Event{Kind: EventAnswered, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Attempt: s.n,
		Status: d.Status, Replayed: d.Replayed, At: now})
	s.c.hostBack(s.host, now) // any answer: the host is up
	if st := d.Status; st < 500 && st != http.StatusTooManyRequests {
		// The host answers: those waiting for it need not.
		return s.c.probes.answered(s.host, s.in.ID)
	}
	return nil
}

// persist reports whether the wait of decision d, made at now, is written
// to the queue (the lease released) instead of slept, and does the
// bookkeeping of a host that did not answer (unanswered): its probe, and
// the handoff of the probe to another intent (made due with ch). A long
// wait is written to the queue; so is a short one of a Run worker while
// other intents are due before it ends (they get the slot, this one goes
// behind them: oldest due first), any wait but a probe's for a host that
// did not answer (its answer to another intent makes this one due at
// once), and the wait after the last attempt Config.MaxAttempts allows.
func (s *sending) persist(ctx context.Context, now time.Time, d policy.Decision, unanswered, handoff bool, ch *queue.Change) bool {
	c, next := s.c, d.At
	persist := s.lastTry || next.Sub(now) > c.cfg.MaxSleep || (unanswered && next.Sub(now) > probeInterval) ||
		(s.yield && c.othersDue(ctx, next))
	if unanswered {
		c.hostDown(s.host, s.lastErr, now)
		if !next.After(now.Add(probeInterval)) {
			c.emit(Event{Kind: EventProbing, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Host: s.host,
				Attempt: s.n, Next: next, Wait: next.Sub(now), Reason: s.lastErr, At: now})
		}
		c.probes.planned(s.host, s.in.ID, now, next, persist)
		if handoff || (d.Probing && next.After(now.Add(probeInterval))) {
			// Its attempt budget is spent: another intent probes.
			at := now.Add(probeInterval)
			if other := c.probes.handoff(s.host, s.in.ID, at); other != "" {
				ch.HandOff, ch.HandOffAt = other, at
			}
		}
	}
	if persist && s.lastTry {
		c.limit.exhaust(s.in.ID) // pending; this Client claims it no more
	}
	return persist
}

// started announces attempt s.n.
func (s *sending) started() {
	s.lastTry = s.c.limit.tried(s.in.ID)
	s.c.log.Debug("idemkit: attempt", "intent", s.in.ID, "key", s.in.Key, "attempt", s.n, "url", redact(s.in.URL))
	s.c.emit(Event{Kind: EventAttemptStarted, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Attempt: s.n})
}

// rescheduled announces a wait written to the queue.
func (s *sending) rescheduled(next time.Time, reason string) {
	s.c.log.Debug("idemkit: rescheduled", "intent", s.in.ID, "next", next, "reason", reason)
	now := s.c.now()
	s.c.emit(Event{Kind: EventRetrying, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Attempt: s.n,
		Reason: reason, Wait: max(next.Sub(now), 0), Next: next, Queued: true, At: now})
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// ended is called once an intent reached a terminal state in this process.
func (c *Client) ended(in *Intent) {
	c.forget(in.ID)
	c.broadcast()
	c.log.Info("idemkit: intent ended", "intent", logID(in.ID, in.Key), "state", in.State,
		"attempts", in.Attempts, "error", in.LastError)
	e := Event{Kind: EventEnded, IntentID: in.ID, Key: in.Key, URL: redact(in.URL), Attempt: in.Attempts,
		State: in.State, Reason: in.LastError}
	if in.Outcome != nil {
		e.Status, e.Replayed = in.Outcome.Status, in.Outcome.Replayed
	}
	c.emit(e)
}

// after re-reads the intent once its claim is over, and announces its end.
// When the queue write (err) or the read fails, it returns the intent as
// it was claimed, with the error: the caller still has its id.
func (c *Client) after(ctx context.Context, claimed *Intent, err error) (*Intent, error) {
	if err != nil {
		return claimed, err
	}
	in, err := c.get(ctx, claimed.ID)
	if err != nil {
		return claimed, err
	}
	if in.State != StatePending {
		c.ended(in)
	}
	return in, nil
}

// othersDue reports whether another intent of this instance is due by
// next (the claimed one is not: its due time is its lease's end).
func (c *Client) othersDue(ctx context.Context, next time.Time) bool {
	due, err := c.q.NextDue(context.WithoutCancel(ctx), c.limit.skipped())
	return err == nil && !due.IsZero() && !due.After(next)
}
