package idemkit

import "time"

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
	c.cfg.OnEventFunc(e)
}
