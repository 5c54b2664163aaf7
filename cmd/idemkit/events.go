package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// tracker follows what this process does to intents: it prints attempts and
// retries, remembers which intents ended here, and enforces --max-attempts.
type tracker struct {
	w io.Writer
	// verbose prints every attempt; retries prints why an attempt is
	// retried (always with verbose).
	verbose, retries bool
	// maxAttempts is Config.MaxAttempts (0: no bound): an intent
	// rescheduled after that many attempts here is exhausted, and
	// onExhausted is called.
	maxAttempts int
	onExhausted func(id string)
	// onStarted, if set, is called when an attempt of an intent starts.
	onStarted func(id string)

	mu        sync.Mutex
	attempts  map[string]int  // intent id -> attempts started here (this process's count)
	exhausted map[string]bool // intent ids that reached maxAttempts
	ended     []string        // ids that ended here, in order
	endedSeen map[string]bool
}

func newTracker(w io.Writer, verbose, retries bool, maxAttempts int) *tracker {
	return &tracker{w: w, verbose: verbose, retries: retries || verbose, maxAttempts: maxAttempts,
		attempts:  map[string]int{},
		exhausted: map[string]bool{}, endedSeen: map[string]bool{}}
}

// logger is the Config.Logger: it prints the SDK's warnings (what
// happens to intents comes from onEvent).
func (t *tracker) logger() *slog.Logger { return slog.New(&trackHandler{t: t}) }

// errMaxAttempts is why an intent stopped at --max-attempts.
type errMaxAttempts struct{ n int }

func (e errMaxAttempts) Error() string {
	return fmt.Sprintf("--max-attempts %d reached in this run; the intent stays pending", e.n)
}

func (t *tracker) exhaust(id string) {
	if id == "" {
		return
	}
	t.mu.Lock()
	first := !t.exhausted[id]
	t.exhausted[id] = true
	t.mu.Unlock()
	if first && t.onExhausted != nil {
		t.onExhausted(id)
	}
}

// takeEnded returns the ids that ended here since the last call.
func (t *tracker) takeEnded() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.ended
	t.ended = nil
	return out
}

// exhaustedIDs returns the intents that reached --max-attempts here.
func (t *tracker) exhaustedIDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.exhausted))
	for id := range t.exhausted {
		out = append(out, id)
	}
	return out
}

// endedSinceStart returns every intent that ended in this process.
func (t *tracker) endedSinceStart() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.endedSeen))
	for id := range t.endedSeen {
		out = append(out, id)
	}
	return out
}

// endedHere reports whether the intent ended in this process.
func (t *tracker) endedHere(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endedSeen[id]
}

func (t *tracker) printf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "idemkit: "+format+"\n", args...)
}

// onEvent is the Config.OnEventFunc: it follows every step of the
// intents this process sends.
func (t *tracker) onEvent(e idemkit.Event) {
	id := e.IntentID
	switch e.Kind {
	case idemkit.EventAttemptStarted:
		t.mu.Lock()
		t.attempts[id]++
		t.mu.Unlock()
		if t.onStarted != nil {
			t.onStarted(id)
		}
		if t.verbose {
			t.printf("%s attempt %d: %s", shortID(id), e.Attempt, e.URL)
		}
	case idemkit.EventRetrying:
		switch {
		case t.retries && e.Queued:
			t.printf("%s attempt %d: %s; next attempt at %s with the same key (the wait is written to the queue)", shortID(id), e.Attempt, e.Reason, fmtTime(e.Next))
		case t.retries:
			t.printf("%s attempt %d: %s; retrying in %v with the same key", shortID(id), e.Attempt, e.Reason, e.Wait.Round(time.Millisecond))
		}
		t.checkExhausted(id)
	case idemkit.EventEnded:
		t.mu.Lock()
		if !t.endedSeen[id] {
			t.endedSeen[id] = true
			t.ended = append(t.ended, id)
		}
		t.mu.Unlock()
		if t.verbose {
			line := fmt.Sprintf("%s ended %s after %d attempt(s)", shortID(id), e.State, e.Attempt)
			if e.Reason != "" {
				line += ": " + e.Reason
			}
			t.printf("%s", line)
		}
	}
}

// checkExhausted marks an intent that is retried after --max-attempts
// attempts here.
func (t *tracker) checkExhausted(id string) {
	t.mu.Lock()
	n := t.attempts[id]
	t.mu.Unlock()
	if t.maxAttempts > 0 && n >= t.maxAttempts {
		t.exhaust(id)
	}
}

// warn prints an SDK log record at WARN or above (the SDK's own
// problems: a claim that failed, a queue opened elsewhere).
func (t *tracker) warn(msg string, a map[string]slog.Value) {
	parts := make([]string, 0, len(a))
	for k, v := range a {
		parts = append(parts, k+"="+v.String())
	}
	slices.Sort(parts)
	t.printf("%s %s", strings.TrimPrefix(msg, "idemkit: "), strings.Join(parts, " "))
}

// trackHandler is a slog.Handler that hands every record to a tracker.
type trackHandler struct{ t *tracker }

func (h *trackHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

// Handle prints WARN and above, and at INFO the takeover of a dead
// process's intents (the user should know why an attempt starts at once).
func (h *trackHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && !strings.HasPrefix(r.Message, "idemkit: taking over") {
		return nil
	}
	a := make(map[string]slog.Value, r.NumAttrs())
	r.Attrs(func(at slog.Attr) bool {
		a[at.Key] = at.Value.Resolve()
		return true
	})
	h.t.warn(r.Message, a)
	return nil
}

func (h *trackHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *trackHandler) WithGroup(string) slog.Handler      { return h }
