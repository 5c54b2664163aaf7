package idemriver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idemkit/internal/policy"
)

// worker is the River worker of intents: one HTTP attempt per job run.
type worker struct {
	river.WorkerDefaults[intentArgs]
	c *Client
}

// Work makes one attempt of the intent, or ends it, or puts it off: the
// straight line of the package doc (record the attempt, send, decide with
// policy.Decide, apply the decision with one River state change).
func (w *worker) Work(ctx context.Context, job *river.Job[intentArgs]) error {
	c := w.c
	a := &job.Args
	p, err := readProgress(job.Metadata)
	if err != nil {
		return err
	}
	now := time.Now()
	// River's fetch committed this run (attempt, attempted_at) before Work
	// was called: that is the attempt's durable record, before its first
	// byte. Runs it counted whose result was never recorded are attempts
	// whose worker died, perhaps with the request on the wire.
	started := now
	if job.AttemptedAt != nil && job.AttemptedAt.Before(now) {
		started = *job.AttemptedAt
	}
	p.recoverLost(job.JobRow, c.cfg.MaxAttemptsPerHour)
	p.RiverAttempt = job.Attempt
	host, hookHost := hostOf(a.URL)
	prof := c.profileFor(hookHost)
	hw, err := c.hostWindow(ctx, host)
	if err != nil {
		// Nothing was sent: put the run off (an error would leave River
		// to retry it, and the next run would count this one as an
		// attempt whose answer was lost).
		p.LastError = "reading the host's window: " + err.Error()
		return c.snooze(ctx, &p, c.cfg.Backoff(policy.BackoffBase, policy.BackoffCap, p.Waits, nil))
	}
	window := c.cfg.Window
	if prof.Window > 0 {
		window = prof.Window
	}
	hz := policy.NewHorizon(started, p.FirstAttemptAt, window, hw, c.cfg.SafetyMargin, p.Horizon)
	if p.Attempts > 0 && now.After(hz.At) {
		return c.end(ctx, &p, StateExpired, nil, policy.ExpiredReason(hz.At, p.LastError))
	}
	// The budget, before a new attempt: a worker death is no answer, so no
	// decision put the intent off after it.
	budget := policy.Budget{Max: c.cfg.MaxAttemptsPerHour}
	if m := budget.Max; m > 0 && len(p.Starts) >= m {
		budget.Oldest = p.Starts[len(p.Starts)-m]
		if at, limited := budget.Allow(now); limited {
			msg := p.LastError + "; " + budget.Reason()
			if p.Attempts > 0 && at.After(hz.At) {
				return c.end(ctx, &p, StateExpired, nil, policy.ExpiredReason(hz.At, msg))
			}
			p.LastError = msg
			return c.snooze(ctx, &p, at.Sub(now))
		}
	}
	f := policy.Facts{
		Attempt: p.Attempts + 1, Retries: p.Waits, Profile: prof,
		CheckRetry: c.cfg.CheckRetry, Backoff: c.cfg.Backoff,
		Unanswered: p.Unanswered, Horizon: hz,
	}

	// Build the attempt; the send hook adds credentials.
	req, err := c.request(ctx, a, prof)
	if err != nil {
		f.Unsendable = err
	} else if c.cfg.SendHookFunc != nil {
		if herr := c.cfg.SendHookFunc(hookHost, req); herr != nil {
			f.Skipped = fmt.Errorf("send hook: %w", herr)
		}
	}
	if f.Unsendable != nil || f.Skipped != nil {
		f.Attempt = max(p.Attempts, 1)
		f.Now = now
		return c.apply(ctx, &p, nil, nil, host, policy.Decide(ctx, f))
	}

	// The attempt (River's fetch recorded it), then its first byte.
	p.Attempts++
	if p.FirstAttemptAt.IsZero() {
		p.FirstAttemptAt = started
	}
	p.Horizon = hz.At
	p.Starts = appendStart(p.Starts, started, c.cfg.MaxAttemptsPerHour)
	resp, body, sendErr := policy.Send(c.httpc, req)
	if ctx.Err() != nil {
		// Stopped (or River's job timeout): the answer is lost, the
		// intent is due again at once, for any worker, with the same key.
		if p.Unanswered == 0 {
			p.Unanswered = p.Attempts
		}
		p.LastError = fmt.Sprintf("attempt %d: canceled: %v", p.Attempts, context.Cause(ctx))
		return c.snooze(ctx, &p, 0)
	}

	// Decide, then apply.
	f.Now, f.Resp, f.Body, f.Err = time.Now(), resp, body, sendErr
	if b := budget.Max; b > 0 && len(p.Starts) >= b {
		f.Budget.Oldest = p.Starts[len(p.Starts)-b]
	}
	f.Budget.Max = budget.Max
	return c.apply(ctx, &p, resp, body, host, policy.Decide(ctx, f))
}

// apply records decision d on the job: one River state change.
func (c *Client) apply(ctx context.Context, p *progress, resp *http.Response, body []byte, host string, d policy.Decision) error {
	if d.Learned > 0 {
		if err := c.learnWindow(ctx, host, d.Learned); err != nil {
			c.cfg.Logger.Warn("idemriver: remember window", "host", host, "error", err)
		}
	}
	p.Unanswered, p.Waits = d.Unanswered, d.Retries
	if !d.Horizon.At.IsZero() && (p.Horizon.IsZero() || d.Horizon.At.Before(p.Horizon)) {
		p.Horizon = d.Horizon.At
	}
	switch d.Kind {
	case policy.Retry:
		p.LastError = d.Reason
		return c.snooze(ctx, p, time.Until(d.At))
	case policy.Expired:
		return c.end(ctx, p, StateExpired, nil, d.Reason)
	}
	var o *Outcome
	if d.Answered && resp != nil {
		o = c.keptOutcome(resp, body, d)
	}
	return c.end(ctx, p, State(d.Kind.State()), o, d.Reason)
}

// end records the intent's terminal state (and outcome) on the job: River
// completes a succeeded intent and cancels the others, with the reason.
func (c *Client) end(ctx context.Context, p *progress, state State, o *Outcome, lastErr string) error {
	p.State, p.LastError = state, lastErr
	if o != nil {
		if err := river.RecordOutput(ctx, o); err != nil {
			return err
		}
	}
	if err := river.MetadataSet(ctx, progressKey, p); err != nil {
		return err
	}
	if state == StateSucceeded {
		return nil
	}
	return river.JobCancel(fmt.Errorf("%s: %s", state, lastErr))
}

// snooze records the intent's progress and puts the job off for d: River
// does not count a snooze as an attempt.
func (c *Client) snooze(ctx context.Context, p *progress, d time.Duration) error {
	p.RiverAttempt-- // a snooze gives River's attempt back
	if err := river.MetadataSet(ctx, progressKey, p); err != nil {
		return err
	}
	return river.JobSnooze(max(d, 0))
}

// recoverLost accounts for the runs of job that River counted (its attempt
// number) but whose result was never recorded: each was an attempt that may
// have been sent and whose answer is lost. Their start is taken from the
// rescue that made the job available again (its error's time is the lost
// run's attempted_at), else from the job's creation: earlier than the truth,
// which only brings the horizon closer.
func (p *progress) recoverLost(job *rivertype.JobRow, perHour int) {
	lost := job.Attempt - 1 - p.RiverAttempt
	if lost <= 0 {
		return
	}
	at := job.CreatedAt
	if n := len(job.Errors); n > 0 && strings.Contains(job.Errors[n-1].Error, rescueMessage) {
		at = job.Errors[n-1].At
	}
	if p.FirstAttemptAt.IsZero() || at.Before(p.FirstAttemptAt) {
		p.FirstAttemptAt = at
	}
	for range min(lost, max(perHour, 1)) {
		p.Starts = appendStart(p.Starts, at, perHour)
	}
	if p.Unanswered == 0 {
		p.Unanswered = p.Attempts + 1
	}
	p.Attempts += lost
	p.LastError = fmt.Sprintf("attempt %d: no result recorded (its worker stopped or died, perhaps mid-request)", p.Attempts)
}

func readProgress(metadata []byte) (progress, error) {
	var meta struct {
		Progress progress `json:"idemkit"`
	}
	if len(metadata) > 0 {
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return progress{}, fmt.Errorf("idemriver: job metadata: %w", err)
		}
	}
	return meta.Progress, nil
}

// request builds the request of one attempt: the stored request and the key
// in the profile's header.
func (c *Client) request(ctx context.Context, a *intentArgs, prof *Profile) (*http.Request, error) {
	var body io.Reader
	if len(a.Body) > 0 {
		body = bytes.NewReader(a.Body)
	}
	r, err := http.NewRequestWithContext(ctx, a.Method, a.URL, body)
	if err != nil {
		return nil, err
	}
	r.Header = a.Header.Clone()
	if r.Header == nil {
		r.Header = http.Header{}
	}
	r.Header.Set(prof.KeyHeader, policy.KeyValue(a.Key, a.KeyQuoted))
	return r, nil
}

// keptOutcome is the answer as stored: allowlisted headers only, the body
// cut at 10 MiB, or status and replay marker only with OmitOutcomeBody.
func (c *Client) keptOutcome(resp *http.Response, body []byte, d policy.Decision) *Outcome {
	prof := c.profileFor(strings.ToLower(resp.Request.URL.Host))
	o := &Outcome{Status: resp.StatusCode, Replayed: d.Replayed, KeyReused: d.Kind == policy.KeyReused}
	if c.cfg.OmitOutcomeBody {
		return o
	}
	if len(body) > maxBodySize {
		body = body[:maxBodySize]
	}
	o.Body = body
	o.Header = policy.StoredOutcomeHeader(resp.Header, prof, c.cfg.CredentialHeaders, c.cfg.OutcomeHeaders)
	return o
}

// appendStart appends an attempt's start, keeping the last perHour (the
// budget's attempt log).
func appendStart(starts []time.Time, t time.Time, perHour int) []time.Time {
	starts = append(starts, t)
	if perHour > 0 && len(starts) > perHour {
		starts = append([]time.Time(nil), starts[len(starts)-perHour:]...)
	}
	return starts
}
