package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// progressInterval is how often run looks at the queue for its progress
// line and the intents that ended.
const progressInterval = 200 * time.Millisecond

func newRunCmd(e *env, g *globals) *cobra.Command {
	var (
		untilDone   bool
		all         bool
		concurrency int
		headers     []string
		host        string
		sf          sendFlags
	)
	cmd := &cobra.Command{
		Use:   "run [--until-done [--all]] [--concurrency N] [-H 'Authorization: Bearer x']...",
		Short: "Send due intents until SIGINT/SIGTERM, or with --until-done until none is pending",
		Long: `run sends due intents, retrying each with its own key, until SIGINT or SIGTERM (exit 0
on SIGTERM). With --until-done it exits once no intent is pending. Each intent that ends in
this run is printed on stdout (a summary line, or with --json one JSON object); a progress
line with the counts by state goes to stderr (redrawn in place on a terminal); -v shows every
attempt and why it was retried.

With --until-done the exit status judges this run's intents only: those pending when it
started and those it finished (an old failed intent does not fail every later run; --all
judges every intent in the queue). A pending intent whose row is damaged is never sent and
exits 1.

Headers given with -H are added at send time and never stored: use them for the credentials
the original request had (they are not in the queue; a 401 or 403 is usually a missing -H).
They go to one host only: --host, else the host of the pending intents if they all have the
same one (run refuses to guess between several), else the first host this run sends to.
Intents for other hosts are sent without them. -H Idempotency-Key is refused.

run creates the queue file if it does not exist (a worker may start before the first
submit); with --until-done a missing queue means nothing to do (exit 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			if all && !untilDone {
				return usagef("--all needs --until-done")
			}
			if concurrency < 1 {
				return usagef("--concurrency %d: must be at least 1", concurrency)
			}
			h, err := parseHeaders(headers)
			if err != nil {
				return err
			}
			if _, ok := h["Idempotency-Key"]; ok {
				// Added to every request, it would replace each intent's own key.
				return usagef("-H Idempotency-Key: every intent has its own key (give it to 'idemkit submit --key')")
			}
			qf, err := g.queueFile(e)
			if err != nil {
				return err
			}
			if untilDone {
				ok, err := qf.exists()
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintf(e.stderr, "idemkit: no queue at %s: nothing to do\n", qf.path)
					return nil
				}
			}
			ctx, cancel := sf.context(cmd.Context())
			defer cancel()
			p := newProgress(e.stderr, e.stderrTTY)
			t := newTracker(p, g.verbose, g.verbose, sf.maxAttempts)
			var scope *hostScope // set before Run starts
			cfg := sf.config(t, func(r *http.Request) error {
				if scope.matches(r.URL) {
					for k, v := range h {
						r.Header[k] = v
					}
				} else if len(h) > 0 {
					scope.skipped(r.URL, p)
				}
				return nil
			})
			cfg.Concurrency = concurrency
			// A signal during the setup reads stops run cleanly afterwards,
			// not with a "context canceled" error: they do not wait on it.
			setup := context.WithoutCancel(cmd.Context())
			c, err := qf.open(setup, mayCreate, cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			if len(h) > 0 {
				if scope, err = newHostScope(setup, c, host); err != nil {
					return err
				}
				if host == "" && scope.origin != "" {
					fmt.Fprintf(e.stderr, "idemkit: -H applies to %s (the host of every pending intent) and no other host\n", scope.origin)
				}
			}
			r := &runner{e: e, g: g, c: c, t: t, p: p, creds: credentialsIn(h), queue: qf.path, window: sf.window}
			r.scope = scope
			if err := r.warnMissingCredentials(setup, h); err != nil {
				return err
			}
			if !untilDone {
				return r.forever(ctx)
			}
			return r.untilDone(ctx, all)
		},
	}
	cmd.Flags().BoolVar(&untilDone, "until-done", false, "exit once no intent is pending")
	cmd.Flags().BoolVar(&all, "all", false, "with --until-done: judge every intent in the queue, not only this run's")
	cmd.Flags().IntVar(&concurrency, "concurrency", (*idemkit.Config)(nil).WithDefaults().Concurrency, "intents sent at once")
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "header added at send time to --host only, never stored (repeatable)")
	cmd.Flags().StringVar(&host, "host", "", "the host -H is sent to: https://api.example.com or api.example.com (default: the host of the pending intents, if they share one)")
	sf.register(cmd)
	return cmd
}

// runner is one run command: the SDK's Run plus the output loop.
type runner struct {
	e      *env
	g      *globals
	c      *idemkit.Client
	t      *tracker
	p      *progress
	creds  []string   // credential headers given with -H
	scope  *hostScope // where -H goes; nil without -H
	queue  string
	window time.Duration
}

// start runs the SDK's Run until ctx ends; the returned func stops it and
// returns its error.
func (r *runner) start(ctx context.Context) func() error {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.c.Run(runCtx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// tick updates the progress line and prints the intents that ended here.
func (r *runner) tick(ctx context.Context) (map[idemkit.IntentState]int, error) {
	ctx = context.WithoutCancel(ctx)
	for _, id := range r.t.takeEnded() {
		in, err := r.c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := r.printEnded(in); err != nil {
			return nil, err
		}
	}
	counts, err := r.c.Counts(ctx)
	if err != nil {
		return nil, err
	}
	r.p.update(countsLine(counts))
	return counts, nil
}

func (r *runner) printEnded(in *idemkit.Intent) error {
	if r.g.json {
		b, err := json.Marshal(toJSON(in))
		if err != nil {
			return err
		}
		r.p.println(r.e.stdout, string(b))
		return nil
	}
	r.p.println(r.e.stdout, summary(in))
	if in.Outcome != nil && (in.Outcome.Status == http.StatusUnauthorized || in.Outcome.Status == http.StatusForbidden) && r.scope == nil {
		next := "idemkit retry " + shortID(in.ID)
		if in.State == idemkit.StateUnknown {
			next = "idemkit retry --same-key " + shortID(in.ID) // a new key could charge twice
		}
		r.p.println(r.e.stderr, fmt.Sprintf("idemkit: %s: the server answered %s and this run sent no credentials: credential headers are never stored; give them with -H (then '%s')",
			shortID(in.ID), statusText(in.Outcome.Status), next))
	}
	return nil
}

// warnMissingCredentials says, before anything is sent, which pending
// intents were queued with credential headers this run does not give
// them (the queue holds their names, never their values).
func (r *runner) warnMissingCredentials(ctx context.Context, h http.Header) error {
	pending, err := listAll(ctx, r.c, idemkit.StatePending)
	if err != nil && !isCorrupt(err) {
		return err
	}
	for _, in := range pending {
		var missing []string
		u, perr := url.Parse(in.URL)
		for _, name := range in.CredentialHeaders {
			if h.Get(name) == "" || perr != nil || !r.scope.covers(u) {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			continue
		}
		flags := make([]string, len(missing))
		for i, m := range missing {
			flags[i] = "-H \"" + m + ": $" + credEnv(m) + "\""
		}
		fmt.Fprintf(r.e.stderr, "idemkit: %s was queued with %s, which this run does not send (never stored): give %s, or expect a 401/403\n",
			shortID(in.ID), strings.Join(missing, ", "), strings.Join(flags, " "))
	}
	return nil
}

// forever is run without --until-done: until ctx ends. SIGTERM exits 0;
// --timeout with intents pending exits 2.
func (r *runner) forever(ctx context.Context) error {
	stop := r.start(ctx)
	ticker := time.NewTicker(progressInterval)
	defer ticker.Stop()
	for ctx.Err() == nil {
		if _, err := r.tick(ctx); err != nil {
			_ = stop()
			return err
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
	if err := stop(); err != nil {
		return err
	}
	counts, err := r.tick(ctx)
	r.p.finish()
	if err != nil {
		return err
	}
	var te errTimeout
	if errors.As(context.Cause(ctx), &te) && counts[idemkit.StatePending] > 0 {
		return r.interrupted(te.Error(), counts[idemkit.StatePending])
	}
	return nil
}

// interrupted is the exit-2 error with the command that resumes.
func (r *runner) interrupted(why string, pending int) error {
	abs, err := filepath.Abs(r.queue)
	if err != nil {
		abs = r.queue
	}
	return &statusError{code: exitInterrupted, err: fmt.Errorf("%s with %d intent(s) pending; they stay queued: resume (same keys) with:\n  %s",
		why, pending, resumeHint(abs, r.window, r.scope.String(), r.neededCredentials()))}
}

// neededCredentials are the credential headers the resume command needs:
// those given with -H and those the pending intents were queued with.
func (r *runner) neededCredentials() []string {
	names := slices.Clone(r.creds)
	pending, _ := listAll(context.Background(), r.c, idemkit.StatePending)
	for _, in := range pending {
		for _, n := range in.CredentialHeaders {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names
}

func (r *runner) untilDone(ctx context.Context, all bool) error {
	// Pending rows that cannot be decoded are never sent (a claim sets them
	// aside): they must not keep run waiting forever.
	setup := context.WithoutCancel(ctx)
	damaged, damageErr := damagedPending(setup, r.c)
	if damageErr != nil && damaged == 0 {
		return damageErr
	}
	// This run's intents: those pending now, and those that end here.
	mine := map[string]bool{}
	startPending, err := listAll(setup, r.c, idemkit.StatePending)
	if err != nil && !isCorrupt(err) {
		return err
	}
	for _, in := range startPending {
		mine[in.ID] = true
	}

	stop := r.start(ctx)
	ticker := time.NewTicker(progressInterval)
	defer ticker.Stop()
	var exhausted []string
	for {
		counts, err := r.tick(ctx)
		if err != nil {
			_ = stop()
			r.p.finish()
			return err
		}
		exhausted, err = r.exhaustedPending(ctx)
		if err != nil {
			_ = stop()
			r.p.finish()
			return err
		}
		if counts[idemkit.StatePending] <= damaged+len(exhausted) {
			break
		}
		select {
		case <-ctx.Done():
			_ = stop()
			counts, _ = r.tick(ctx)
			r.p.finish()
			why := "interrupted"
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				why = cause.Error()
			}
			return r.interrupted(why, counts[idemkit.StatePending])
		case <-ticker.C:
		}
	}
	if err := stop(); err != nil {
		r.p.finish()
		return err
	}
	_, err = r.tick(ctx)
	r.p.finish()
	if err != nil {
		return err
	}

	var judged []*idemkit.Intent
	if all {
		for _, s := range []idemkit.IntentState{idemkit.StateFailed, idemkit.StateUnknown, idemkit.StateExpired, idemkit.StateCanceled} {
			list, err := listAll(setup, r.c, s)
			if err != nil && !isCorrupt(err) {
				return err
			}
			judged = append(judged, list...)
		}
	} else {
		for id := range mine {
			in, err := r.c.Get(setup, id)
			if isCorrupt(err) {
				continue // reported by damageErr
			}
			if err != nil {
				return err
			}
			if !r.t.endedHere(id) {
				// Ended by another process: not printed yet.
				if err := r.printEnded(in); err != nil {
					return err
				}
			}
			judged = append(judged, in)
		}
		for _, id := range r.t.endedSinceStart() {
			if !mine[id] {
				in, err := r.c.Get(setup, id)
				if err != nil {
					return err
				}
				judged = append(judged, in)
			}
		}
	}
	var failed, expired int
	for _, in := range judged {
		switch resultCode(in) {
		case exitFailed:
			failed++
		case exitExpired:
			expired++
		}
		if all && resultCode(in) != exitOK && !r.t.endedHere(in.ID) {
			fmt.Fprintf(r.e.stderr, "idemkit: %s\n", summary(in))
		}
	}
	scope := "of this run's intents"
	if all {
		scope = "of the queue's intents"
	}
	switch {
	case damageErr != nil:
		return fmt.Errorf("%d pending intent(s) cannot be sent: %w", damaged, damageErr)
	case expired > 0:
		return &statusError{code: exitExpired, err: fmt.Errorf("%d %s ended with their outcome unknown (unknown or expired: they may have taken effect; reconcile them with the server, never retry them under a new key), %d ended failed or canceled", expired, scope, failed)}
	case failed > 0:
		return &statusError{code: exitFailed, err: fmt.Errorf("%d %s ended failed or canceled", failed, scope)}
	case len(exhausted) > 0:
		return r.interrupted(fmt.Sprintf("--max-attempts %d reached", r.t.maxAttempts), len(exhausted))
	}
	return nil
}

// exhaustedPending returns the intents that reached --max-attempts here
// and are still pending.
func (r *runner) exhaustedPending(ctx context.Context) ([]string, error) {
	var out []string
	for _, id := range r.t.exhaustedIDs() {
		in, err := r.c.Get(context.WithoutCancel(ctx), id)
		if err != nil {
			return nil, err
		}
		if in.State == idemkit.StatePending {
			out = append(out, id)
		}
	}
	return out, nil
}

// damagedPending returns how many pending intents cannot be decoded and
// the error that reports them; with 0, a non-nil error is a failure to
// look.
func damagedPending(ctx context.Context, c *idemkit.Client) (int, error) {
	_, err := listAll(ctx, c, idemkit.StatePending)
	if err == nil || !isCorrupt(err) {
		return 0, err
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap()), err
	}
	return 1, err
}

// hostScope is the host that -H is sent to.
type hostScope struct {
	origin string // scheme://host[:port], or "" with hostOnly
	host   string // host[:port] when --host named no scheme
	mu     sync.Mutex
	warned map[string]bool
}

// newHostScope resolves --host, or infers it from the pending intents.
func newHostScope(ctx context.Context, c *idemkit.Client, flag string) (*hostScope, error) {
	s := &hostScope{warned: map[string]bool{}}
	if flag != "" {
		if strings.Contains(flag, "://") {
			u, err := url.Parse(flag)
			if err != nil || u.Host == "" {
				return nil, usagef("--host %q: want https://host[:port] or host[:port]", flag)
			}
			s.origin = originOf(u)
		} else {
			s.host = strings.ToLower(flag)
		}
		return s, nil
	}
	pending, err := listAll(ctx, c, idemkit.StatePending)
	if err != nil && !isCorrupt(err) {
		return nil, err
	}
	hosts := map[string]bool{}
	for _, in := range pending {
		if u, err := url.Parse(in.URL); err == nil {
			hosts[originOf(u)] = true
		}
	}
	list := make([]string, 0, len(hosts))
	for h := range hosts {
		list = append(list, h)
	}
	slices.Sort(list)
	switch {
	case len(list) == 1:
		s.origin = list[0]
	case len(list) > 1:
		return nil, usagef("-H: the pending intents are for %d hosts (%s): give --host to say which one gets the headers", len(list), strings.Join(list, ", "))
	}
	// Nothing pending: the first host this run sends to.
	return s, nil
}

func originOf(u *url.URL) string { return strings.ToLower(u.Scheme + "://" + u.Host) }

// matches reports whether the request goes to the scoped host. An
// inferred scope with nothing pending at the start becomes the first host
// sent to.
func (s *hostScope) matches(u *url.URL) bool {
	if s == nil {
		return true // no -H
	}
	s.mu.Lock()
	if s.host == "" && s.origin == "" {
		s.origin = originOf(u)
	}
	s.mu.Unlock()
	return s.covers(u)
}

// covers reports whether -H would go to u, without fixing an inferred
// scope (matches does).
func (s *hostScope) covers(u *url.URL) bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.host != "":
		return strings.ToLower(u.Host) == s.host
	case s.origin == "":
		return true
	}
	return originOf(u) == s.origin
}

// skipped says once per host that -H was not sent there.
func (s *hostScope) skipped(u *url.URL, p *progress) {
	o := originOf(u)
	s.mu.Lock()
	first := !s.warned[o]
	s.warned[o] = true
	s.mu.Unlock()
	if first {
		p.println(p.w, fmt.Sprintf("idemkit: -H not sent to %s (it goes to %s only)", o, s.String()))
	}
}

func (s *hostScope) String() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != "" {
		return s.host
	}
	return s.origin
}
