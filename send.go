package idemkit

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// sending is one claim of one intent, as the send loop drives it.
type sending struct {
	c  *Client
	in *Intent
	l  lease
	// n is the number of the current attempt, started in the queue.
	n int
	// retries counts the waits so far, from the attempts already made, so
	// that the backoff keeps growing across reschedules and restarts.
	retries int
	hz      horizon
	prof    *Profile // the host's dialect
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
	// may have been sent (0: none): see judge.
	unanswered int
}

// send drives a claimed intent: it sends the attempt the claim started,
// classifies the answer, writes the result to the queue, and then either
// returns (a definitive answer, the horizon reached, a wait too long to
// sleep, ctx ended) or sleeps in-process, holding the lease, and starts
// the next attempt. It returns the intent as stored afterwards. An
// errLeaseLost error means another process owns the intent now.
//
// yield is set for a Run worker: it gives its slot up rather than sleep
// while other intents are due.
func (c *Client) send(ctx context.Context, cl *claimed, yield bool) (*Intent, error) {
	s := &sending{c: c, in: cl.in, l: cl.lease, n: cl.attempt, retries: max(cl.attempt-1, 0),
		hz: cl.hz, prof: c.cfg.profileFor(cl.in.URL), host: hostOf(cl.in.URL), yield: yield, unanswered: cl.in.Unanswered}
	if u, err := url.Parse(s.in.URL); err == nil {
		s.hookHost = strings.ToLower(u.Host)
	}
	wctx := context.WithoutCancel(ctx) // what the queue records outlives ctx
	for {
		// Attempt.
		req, err := s.request(ctx)
		if err != nil {
			// prepare() accepted it, so the stored row is bad.
			st := StateFailed
			if s.unanswered > 0 {
				st = StateUnknown
			}
			return s.end(wctx, st, nil, s.unknownPrefix(st)+"cannot build request: "+err.Error(), &attemptResult{n: s.n, errText: err.Error(), notSent: true})
		}
		if c.cfg.SendHookFunc != nil {
			if err := c.cfg.SendHookFunc(s.hookHost, req); err != nil {
				return s.hookFailed(wctx, err)
			}
		}
		s.started()
		resp, body, err := s.do(req)

		// Classify.
		now := c.now()
		a, dec := s.classify(ctx, now, resp, body, err)
		facts := attemptFacts{dec: dec, unanswered: s.unanswered}
		if resp != nil {
			facts.status = resp.StatusCode
		}
		if dec.verdict == verdictPolicy {
			facts.policyRetry, facts.policyErr = c.cfg.CheckRetry(ctx, resp, err)
		}
		j := judge(facts)

		// Persist, then return or wait.
		switch {
		case ctx.Err() != nil:
			return s.canceled(wctx, ctx, a)
		case !j.retry && (facts.policyErr != nil || resp == nil): // a transport error is no answer
			return s.end(wctx, j.state, nil, s.unknownPrefix(j.state)+"gave up: "+redactErr(cmp.Or(facts.policyErr, err)), a)
		case !j.retry:
			return s.answered(wctx, resp, body, dec, a, j.state)
		}
		if resp == nil && !a.notSent && s.unanswered == 0 {
			s.unanswered = s.n // its answer is lost: it may have reached the server
		}
		s.lastErr = describe(resp, err)
		if j.inFlight {
			s.lastErr += fmt.Sprintf(" (not classified by profile %s; attempt %d's answer was lost, so taken as \"still in progress\" and retried with the same key)", s.prof.Name, s.unanswered)
		}
		next, persist, ok, err := s.schedule(ctx, now, resp, dec)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return s.expire(wctx, a)
		case persist:
			if err := c.q.reschedule(wctx, s.l, now, wait{due: next, attempt: a, lastErr: s.lastErr}); err != nil {
				return c.after(wctx, s.in, err)
			}
			s.rescheduled(next, s.lastErr)
			return c.after(wctx, s.in, nil)
		}
		// A short wait: sleep in-process, holding the lease over the sleep.
		w := wait{due: next, leasedUntil: next.Add(c.cfg.LeaseDuration), attempt: a, lastErr: s.lastErr}
		if err := c.q.reschedule(wctx, s.l, now, w); err != nil {
			return nil, err
		}
		if err := s.sleep(ctx, now, next); err != nil {
			return s.canceled(wctx, ctx, nil) // the attempt is logged already
		}

		// The next attempt, under the same lease: never past the horizon.
		now = c.now()
		if now.After(s.hz.at) {
			return s.expire(wctx, nil)
		}
		n, h, err := c.q.startAttempt(wctx, s.l, now, s.hz.at, now.Add(c.cfg.LeaseDuration))
		if err != nil {
			return nil, err
		}
		s.n, s.hz.at = n, h
	}
}

// request builds the request of one attempt: the stored request, the
// credential headers this process holds, and the key in the profile's
// header. Queued under another configuration, the key may not fit the
// profile this process has for the host: it is never sent altered.
func (s *sending) request(ctx context.Context) (*http.Request, error) {
	if err := s.prof.checkKey(s.in.Key, s.in.keyForm == "quoted"); err != nil {
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
	r.Header.Set(s.prof.KeyHeader, s.prof.keyValue(s.in.Key, s.in.keyForm == "quoted"))
	return r, nil
}

// do sends one attempt and reads its answer, up to maxBodySize+1 bytes: an
// answer cut off by the network is no answer.
func (s *sending) do(req *http.Request) (*http.Response, []byte, error) {
	resp, err := s.c.httpc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodySize+1))
	resp.Body.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("reading response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, body, nil
}

// classify reads the result of attempt s.n: the entry of the attempt log,
// the window the host advertised, and what the host's profile makes of the
// answer.
func (s *sending) classify(ctx context.Context, now time.Time, resp *http.Response, body []byte, err error) (*attemptResult, decision) {
	a := &attemptResult{n: s.n, host: s.host}
	if err != nil {
		a.errText = redactErr(err)
		a.notSent = neverSent(err)
		return a, decision{verdict: verdictPolicy}
	}
	a.status = resp.StatusCode
	if w, ok := parseWindow(resp.Header); ok {
		a.learned = w
		s.hz.learn(w)
		a.horizon = s.hz.at
	}
	dec := classify(s.prof, resp.StatusCode, resp.Header, body)
	a.replayed = dec.replayed
	s.c.emit(Event{Kind: EventAnswered, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Attempt: s.n,
		Status: resp.StatusCode, Replayed: dec.replayed, At: now})
	s.c.hostBack(s.host, now) // any answer: the host is up
	if st := resp.StatusCode; st < 500 && st != http.StatusTooManyRequests {
		// The host answers: those waiting for it need not.
		s.c.wakeHost(context.WithoutCancel(ctx), s.host, s.in.ID, now)
	}
	return a, dec
}

// schedule plans the next attempt after a retryable result at now: the
// policy's backoff or the server's Retry-After, cut short by the horizon
// (ok false: no attempt may start before it), capped for the probe of a
// host that does not answer, delayed to keep within
// Config.MaxAttemptsPerHour. persist reports whether the wait is written
// to the queue (the lease released) instead of slept.
func (s *sending) schedule(ctx context.Context, now time.Time, resp *http.Response, dec decision) (next time.Time, persist, ok bool, err error) {
	c := s.c
	wctx := context.WithoutCancel(ctx)
	backoff := c.cfg.Backoff(backoffBase, backoffCap, s.retries, resp)
	s.retries++
	serverWait, has := retryAfter(resp, now)
	next, ok = schedule(now, s.hz.at, backoff, serverWait, has, dec.minWait, s.hz.lead())
	unanswered := resp == nil
	probe, handoff := false, false
	if ok && unanswered {
		var capped time.Time
		capped, handoff = s.noAnswer(wctx, now, next)
		probe = capped.Before(next)
		next = capped
	}
	if ok {
		// The attempt budget: at most MaxAttemptsPerHour in any hour.
		oldest, err := c.q.nthLastAttempt(wctx, s.in.ID, c.cfg.MaxAttemptsPerHour)
		if err != nil {
			return time.Time{}, false, false, err
		}
		if allowed := oldest.Add(time.Hour); !oldest.IsZero() && allowed.After(next) {
			next = allowed
			s.lastErr += fmt.Sprintf("; %d attempts in the last hour (Config.MaxAttemptsPerHour)", c.cfg.MaxAttemptsPerHour)
			ok = !next.After(s.hz.at)
		}
	}
	// A long wait is written to the queue; so is a short one of a Run
	// worker while other intents are due before it ends (they get the
	// slot, this one goes behind them: oldest due first), and any wait but
	// a probe's for a host that did not answer (its answer to another
	// intent makes this one due at once).
	persist = ok && (s.lastTry || next.Sub(now) > c.cfg.MaxSleep || (unanswered && next.Sub(now) > probeInterval) ||
		(s.yield && c.othersDue(ctx, next)))
	if ok && unanswered {
		c.hostDown(s.host, s.lastErr, now)
		if !next.After(now.Add(probeInterval)) {
			c.emit(Event{Kind: EventProbing, IntentID: s.in.ID, Key: s.in.Key, URL: redact(s.in.URL), Host: s.host,
				Attempt: s.n, Next: next, Wait: next.Sub(now), Reason: s.lastErr, At: now})
		}
		c.probes.planned(s.host, s.in.ID, now, next, persist)
		if handoff || (probe && next.After(now.Add(probeInterval))) {
			// Its attempt budget is spent: another intent probes.
			at := now.Add(probeInterval)
			if other := c.probes.handoff(s.host, s.in.ID, at); other != "" {
				_ = c.q.makeDueBy(wctx, other, at)
			}
		}
	}
	if persist && s.lastTry {
		c.exhaust(s.in.ID) // pending; this Client claims it no more
	}
	return next, persist, ok, nil
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

// answered records an answer that ends the intent in state (judge's):
// succeeded, failed, or unknown (the answer says nothing about an earlier
// attempt whose answer was lost).
func (s *sending) answered(ctx context.Context, resp *http.Response, body []byte, dec decision, a *attemptResult, state IntentState) (*Intent, error) {
	c := s.c
	lastErr := ""
	if len(body) > maxBodySize {
		body = body[:maxBodySize]
		lastErr = "response body cut at 10 MiB"
	}
	keyReused := dec.verdict == verdictKeyReused
	full := &Outcome{Status: resp.StatusCode, Header: resp.Header, Body: body, Replayed: a.replayed, keyReused: keyReused}
	if state != StateSucceeded && lastErr == "" {
		lastErr = describe(resp, nil)
	}
	lastErr = s.unknownPrefix(state) + lastErr
	got, err := s.end(ctx, state, c.cfg.keptOutcome(full, s.prof, true), lastErr, a)
	if got != nil && got.Outcome != nil && c.cfg.OmitOutcomeBody {
		// Not on disk, but the caller of Do still gets the answer.
		got.Outcome = c.cfg.keptOutcome(full, s.prof, false)
	}
	return got, err
}

// unknownPrefix is the start of the last error of an intent ending in
// state: for StateUnknown, which attempt's answer was lost and what to do.
func (s *sending) unknownPrefix(state IntentState) string {
	if state != StateUnknown {
		return ""
	}
	return fmt.Sprintf("outcome unknown: attempt %d got no answer (it may have taken effect) and the last answer says nothing about it; reconcile with the server (resend under the same key, or check), never retry under a new key: ", s.unanswered)
}

// end moves the intent to a terminal state, logging attempt a (if any).
func (s *sending) end(ctx context.Context, state IntentState, o *Outcome, lastErr string, a *attemptResult) (*Intent, error) {
	err := s.c.q.finish(ctx, s.l, s.c.now(), state, o, lastErr, a)
	return s.c.after(ctx, s.in, err)
}

// expire ends the intent expired: no attempt may start before the horizon.
func (s *sending) expire(ctx context.Context, a *attemptResult) (*Intent, error) {
	msg := "horizon " + wire.FormatTime(s.hz.at) + " reached without a definitive answer"
	if s.lastErr != "" {
		msg += "; last error: " + s.lastErr
	}
	return s.end(ctx, StateExpired, nil, msg, a)
}

// canceled releases the lease when ctx (the caller's, or Close) ended, so
// that the intent can be resumed at once, and returns ctx's error. The
// intent's last error stays that of the last real attempt: a stop is not
// what went wrong with the intent.
func (s *sending) canceled(wctx, ctx context.Context, a *attemptResult) (*Intent, error) {
	if a != nil && a.errText == "" {
		a.errText = "canceled: " + ctx.Err().Error()
	}
	lastErr := s.lastErr
	if lastErr == "" {
		lastErr = s.in.LastError
	}
	now := s.c.now()
	_ = s.c.q.reschedule(wctx, s.l, now, wait{due: now, attempt: a, lastErr: lastErr})
	return nil, ctx.Err()
}

// hookFailed skips an attempt that Config.SendHookFunc refused: it is
// logged with the hook's error and the intent rescheduled after a backoff,
// or expired if that is past the horizon.
func (s *sending) hookFailed(ctx context.Context, herr error) (*Intent, error) {
	c := s.c
	now := c.now()
	msg := "send hook: " + herr.Error()
	a := &attemptResult{n: s.n, errText: msg, notSent: true}
	next := now.Add(c.cfg.Backoff(backoffBase, backoffCap, s.retries, nil))
	if next.After(s.hz.at) {
		return s.end(ctx, StateExpired, nil, msg, a)
	}
	err := c.q.reschedule(ctx, s.l, now, wait{due: next, attempt: a, lastErr: msg})
	if err == nil {
		s.rescheduled(next, msg)
	}
	return c.after(ctx, s.in, err)
}

// started announces attempt s.n.
func (s *sending) started() {
	s.lastTry = s.c.tried(s.in.ID)
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

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// keyForm is how the key of intent in travels, recorded at its first claim
// since schema 007 and never changed after: quoted if its host's profile
// sets KeyQuoted, or if it was attempted before under the "ietf" profile
// (which quoted keys until then: its server has seen the quoted form), bare
// otherwise.
func (c *Client) keyForm(in *Intent) string {
	p := c.cfg.profileFor(in.URL)
	if p.KeyQuoted || (in.Attempts > 0 && p.Name == "ietf") {
		return "quoted"
	}
	return "bare"
}
