package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
)

// paymentBody is the request both clients send: 40.00 USD.
const paymentBody = `{"amount": 4000, "currency": "USD", "description": "kill-and-resume demo"}`

// clientTimeout bounds the whole life of a client process.
const clientTimeout = 25 * time.Second

// clientFlags are the flags both client roles take.
type clientFlags struct {
	url     string
	account string
	t0      time.Time
	verbose bool
}

// maxBody bounds what the tracing transport reads of a response: the
// SDK's own limit (10 MiB).
const maxBody = 10 << 20

func (f *clientFlags) register(fs *flag.FlagSet) *int64 {
	fs.StringVar(&f.url, "url", "", "base URL of the payments API")
	fs.StringVar(&f.account, "account", "alice", "account to pay from")
	fs.BoolVar(&f.verbose, "verbose", false, "log to stderr")
	return fs.Int64("t0", 0, "start of the demo, Unix nanoseconds")
}

// since formats t relative to the start of the demo.
func (f *clientFlags) since(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(f.t0).Seconds())
}

// runClient is the idemkit client role: it pays 40.00 USD through an
// idemkit queue file. Started on an empty queue, it submits the payment
// (the intent and its key are on disk before anything is sent) and sends
// it; started on a queue holding a pending intent, it resumes that intent
// with its key. It reports every attempt as it happens.
func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f clientFlags
	fs := flag.NewFlagSet("killresume client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	queue := fs.String("queue", "", "queue file")
	t0 := f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	f.t0 = time.Unix(0, *t0)
	ctx, cancel := context.WithTimeout(ctx, clientTimeout)
	defer cancel()
	em := newEmitter(stdout)

	var logs slog.Handler = slog.DiscardHandler
	if f.verbose {
		logs = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	logs = &takeoverNarrator{next: logs, report: func(pid int64, reason string) {
		em.emit(event{Kind: evTakeover, Text: fmt.Sprintf(
			"the killed client (pid %d) is dead (%s): its lease is taken over at once, with a new fencing token", pid, reason)})
	}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	// LeaseDuration and AttemptTimeout are the SDK's defaults (2m, 30s):
	// the restarted client does not wait for the killed one's lease, it
	// sees that its holder is dead.
	c, err := idemkit.Open(ctx, *queue, &idemkit.Config{
		HTTPClient: &http.Client{Transport: &tracingTransport{base: tr, em: em}},
		// Credentials are never written to the queue: a resumed intent gets
		// them from the hook, at send time.
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+f.account)
			return nil
		},
		Logger: slog.New(logs),
	})
	if err != nil {
		return err
	}
	defer c.Close()

	pending, err := c.List(ctx, &idemkit.ListOptions{State: idemkit.StatePending})
	if err != nil {
		return err
	}
	var in *idemkit.Intent
	if len(pending) == 0 {
		in, err = c.Submit(ctx, &idemkit.Request{
			Method: http.MethodPost,
			URL:    f.url + "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(paymentBody),
		})
		if err != nil {
			return err
		}
		em.emit(event{Kind: evPersisted, Intent: in.ID, Key: in.Key,
			Text: fmt.Sprintf("Submit returned: intent %s is on disk (fsynced), %s, Idempotency-Key %s; nothing has been sent yet", in.ID, in.State, in.Key)})
	} else {
		in = pending[0]
		text := fmt.Sprintf("found intent %s in the queue: %s, %d attempt, no outcome; resuming it with the SAME Idempotency-Key %s",
			in.ID, in.State, in.Attempts, in.Key)
		if in.NextAttemptAt.After(time.Now()) {
			text += fmt.Sprintf("; the killed client's lease on it runs until %s", f.since(in.NextAttemptAt))
		}
		em.emit(event{Kind: evResuming, Intent: in.ID, Key: in.Key, Text: text})
	}

	// Run sends due intents (this one) until stopped; Wait returns once the
	// intent has an outcome.
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(runCtx) }()
	final, werr := c.Wait(ctx, in.ID)
	stopRun()
	if err := <-runDone; err != nil {
		return err
	}
	if final == nil {
		return werr
	}

	attempts, err := c.Attempts(context.WithoutCancel(ctx), in.ID)
	if err != nil {
		return err
	}
	lines := []string{fmt.Sprintf("intent %s: %s after %d %s, all with Idempotency-Key %s:",
		final.ID, final.State, len(attempts), plural(len(attempts), "attempt", "attempts"), final.Key)}
	for _, a := range attempts {
		lines = append(lines, "    "+describeAttempt(&f, a))
	}
	em.info(strings.Join(lines, "\n"))

	done := event{Kind: evDone, Intent: final.ID, Key: final.Key}
	if o := final.Outcome; o != nil {
		done.Status, done.Replayed = o.Status, o.Replayed
		var p struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(o.Body, &p) == nil {
			done.Payment = p.ID
		}
		done.Text = fmt.Sprintf("outcome: %d, Idempotent-Replayed: %t, payment %s", o.Status, o.Replayed, done.Payment)
	}
	em.emit(done)
	return werr
}

// describeAttempt is one line of the attempt log.
func describeAttempt(f *clientFlags, a *idemkit.Attempt) string {
	s := fmt.Sprintf("#%d at %s (lease token %d): ", a.N, f.since(a.StartedAt), a.Token)
	switch {
	case a.FinishedAt.IsZero() && a.Status == 0 && a.Error == "":
		return s + "no answer: the process died with the request in flight"
	case a.Status == 0:
		return s + "no answer: " + a.Error
	case a.Replayed:
		return s + fmt.Sprintf("%d %s, Idempotent-Replayed: true", a.Status, http.StatusText(a.Status))
	}
	return s + fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status))
}

// takeoverNarrator passes the SDK's logs on to next, and reports the
// SDK's takeover of a dead process's lease ("idemkit: taking over intent of
// dead process pid N", logged at Info with the pid and the reason).
type takeoverNarrator struct {
	next   slog.Handler
	report func(pid int64, reason string)
}

func (h *takeoverNarrator) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *takeoverNarrator) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "idemkit: taking over intent of dead process") {
		var pid int64
		var reason string
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "pid":
				pid = a.Value.Int64()
			case "reason":
				reason = a.Value.String()
			}
			return true
		})
		h.report(pid, reason)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *takeoverNarrator) WithAttrs(as []slog.Attr) slog.Handler {
	return &takeoverNarrator{next: h.next.WithAttrs(as), report: h.report}
}

func (h *takeoverNarrator) WithGroup(name string) slog.Handler {
	return &takeoverNarrator{next: h.next.WithGroup(name), report: h.report}
}

// tracingTransport reports every request the SDK sends and every response
// it gets, as it happens.
type tracingTransport struct {
	base http.RoundTripper
	em   *emitter
}

func (t *tracingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Header.Get("Idempotency-Key")
	t.em.emit(event{Kind: evSend, Key: key, Text: fmt.Sprintf("-> %s %s  Idempotency-Key: %s", r.Method, r.URL.Path, key)})
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		t.em.emit(event{Kind: evResponse, Key: key, Text: "<- no answer: " + err.Error()})
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		t.em.emit(event{Kind: evResponse, Key: key, Text: "<- answer cut off: " + err.Error()})
		return resp, nil // the SDK reads the rest (nothing) and retries
	}
	t.em.emit(describeResponse(key, resp, body))
	return resp, nil
}

// describeResponse is the response event of a client.
func describeResponse(key string, resp *http.Response, body []byte) event {
	ev := event{Kind: evResponse, Key: key, Status: resp.StatusCode,
		Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	var p struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	ev.Payment = p.ID
	status := fmt.Sprintf("<- %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	switch {
	case ev.Replayed:
		ev.Text = fmt.Sprintf("%s  Idempotent-Replayed: true  (the stored response of the first request: payment %s)", status, p.ID)
	case resp.StatusCode == http.StatusCreated:
		ev.Text = fmt.Sprintf("%s  (payment %s)", status, p.ID)
	case resp.StatusCode == http.StatusConflict:
		ev.Text = fmt.Sprintf("%s  Retry-After: %s  (%s: the first request is still running; retry later with the same key)",
			status, resp.Header.Get("Retry-After"), problemSlug(p.Type))
	default:
		ev.Text = fmt.Sprintf("%s  %s", status, problemSlug(p.Type))
	}
	return ev
}

// problemSlug returns the slug of a problem type URI.
func problemSlug(typ string) string {
	if i := strings.LastIndexByte(typ, '#'); i >= 0 {
		return typ[i+1:]
	}
	return typ
}
