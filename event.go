package idemkit

import (
	"context"
	"maps"
	"time"
)

// EventKind is what an [Event] reports.
type EventKind string

const (
	// EventAttemptStarted: an attempt is about to be sent (Attempt is its
	// number, counted over the intent's whole life).
	EventAttemptStarted EventKind = "attempt_started"
	// EventAnswered: the server answered an attempt (Status, Replayed).
	// A transport error is not an answer: it shows as the Reason of the
	// EventRetrying that follows.
	EventAnswered EventKind = "answered"
	// EventRetrying: no definitive answer, or a send hook refused the
	// attempt; the intent is retried with the same key at Next, after Wait.
	// Either the same worker sleeps the wait out, holding the intent, or
	// (Queued) the wait is written to the queue and the worker moved on.
	// Reason says why.
	EventRetrying EventKind = "retrying"
	// EventEnded: the intent reached a terminal State in this process.
	EventEnded EventKind = "ended"
	// EventHostDown: an attempt on Host got no answer (connection refused,
	// reset, timeout) after the host had answered, or on the first attempt
	// this process made there. Reason is the error. Intents for the host
	// wait; one of them probes it (EventProbing).
	EventHostDown EventKind = "host_down"
	// EventProbing: the intent is the probe of Host, which does not
	// answer: it tries again at Next (within a second), and when the host
	// answers, every intent waiting for it is due at once.
	EventProbing EventKind = "probing"
	// EventHostBack: Host answered again after EventHostDown.
	EventHostBack EventKind = "host_back"
	// EventProgress: the number of intents in each state (Counts) changed;
	// sent by Run and Drain (at most every 100 ms) while Config.OnEventFunc
	// is set.
	EventProgress EventKind = "progress"
)

// Event is one step of an intent in this process, given to
// Config.OnEventFunc. Fields that do not apply to its Kind are zero.
type Event struct {
	Kind     EventKind
	IntentID string
	Key      string
	// URL is the intent's URL with its query redacted.
	URL string
	// Attempt is the number of the attempt the event is about (for
	// EventEnded, the intent's attempts).
	Attempt int
	// Status and Replayed are the answer's (EventAnswered, and EventEnded
	// when the intent has an outcome).
	Status   int
	Replayed bool
	// Reason is why the intent is retried or rescheduled, or the stored
	// last error of an ended intent.
	Reason string
	// Wait is how long until the next attempt, and Next when it is due
	// (EventRetrying).
	Wait time.Duration
	Next time.Time
	// Queued is set when the wait is written to the queue and the worker
	// moved on (EventRetrying); otherwise the worker sleeps it out.
	Queued bool
	// State is the intent's terminal state (EventEnded).
	State IntentState
	// Host is scheme://host[:port] (EventHostDown, EventProbing,
	// EventHostBack; and the intent's host in every other event).
	Host string
	// Counts is the number of intents in each state (EventProgress), as
	// Client.Counts returns it.
	Counts map[IntentState]int
	// At is the time of the event, on the client's clock.
	At time.Time
}

// emit hands e to Config.OnEventFunc, if set. It runs on the worker's
// goroutine; the function only observes.
func (c *Client) emit(e Event) {
	if c.cfg.OnEventFunc == nil {
		return
	}
	if e.At.IsZero() {
		e.At = c.now()
	}
	if e.Host == "" && e.URL != "" {
		e.Host = hostOf(e.URL)
	}
	c.cfg.OnEventFunc(e)
}

// progressEvery bounds how often EventProgress is sent.
const progressEvery = 100 * time.Millisecond

// progress sends EventProgress if the counts changed since the last one
// and progressEvery passed (force: whatever the time), while
// Config.OnEventFunc is set.
func (c *Client) progress(ctx context.Context, force bool) {
	if c.cfg.OnEventFunc == nil {
		return
	}
	now := time.Now()
	c.progMu.Lock()
	if !force && now.Sub(c.progAt) < progressEvery {
		c.progMu.Unlock()
		return
	}
	c.progAt = now
	c.progMu.Unlock()
	counts, err := c.counts(context.WithoutCancel(ctx))
	if err != nil {
		return
	}
	c.progMu.Lock()
	same := maps.Equal(counts, c.progLast)
	if !same {
		c.progLast = counts
	}
	c.progMu.Unlock()
	if !same {
		c.emit(Event{Kind: EventProgress, Counts: maps.Clone(counts)})
	}
}

// hostDown records that host gave no answer; the first time (since it
// last answered) it is logged and announced.
func (c *Client) hostDown(host, reason string, now time.Time) {
	if !c.probes.markDown(host) {
		return
	}
	c.log.Info("idemkit: host does not answer: its intents wait, one probes it every second", "host", host, "error", reason)
	c.emit(Event{Kind: EventHostDown, Host: host, Reason: reason, At: now})
}

// hostBack records that host answered; if it was down, that is logged
// and announced.
func (c *Client) hostBack(host string, now time.Time) {
	if !c.probes.markUp(host) {
		return
	}
	c.log.Info("idemkit: host answers again: its waiting intents are due now", "host", host)
	c.emit(Event{Kind: EventHostBack, Host: host, At: now})
}
