package intenttest

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// State is an intent's state, spelled as both backends spell it.
type State string

// The states of an intent.
const (
	StatePending   State = "pending"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateUnknown   State = "unknown"
	StateExpired   State = "expired"
	StateCanceled  State = "canceled"
)

// Request is what a case submits.
type Request struct {
	Method string
	URL    string
	Header http.Header
	Body   []byte
}

// Intent is an intent as a backend stores it, in the suite's terms.
type Intent struct {
	ID, Key string
	State   State
	// Status is the outcome's status, 0 when there is no outcome.
	Status   int
	Replayed bool
	Header   http.Header
	Body     []byte

	Attempts       int
	FirstAttemptAt time.Time
	Horizon        time.Time
	LastError      string
}

// Options configure a queue for one case. Every field is plain data, so that
// a worker process (see [Backend].Reopen) gets the same configuration.
type Options struct {
	// Window is the client's Config.Window. Zero: the backend's default.
	Window time.Duration
	// SafetyMargin is the client's Config.SafetyMargin. Zero: default.
	SafetyMargin time.Duration
	// MaxAttemptsPerHour is the attempt budget. Zero: default.
	MaxAttemptsPerHour int
	// AttemptTimeout bounds one attempt.
	AttemptTimeout time.Duration
	// LeaseDuration is how long a worker owns an intent it sends before
	// another may take it over.
	LeaseDuration time.Duration
	// Credential is the bearer token the send hook adds to every attempt
	// (Authorization: Bearer <Credential>).
	Credential string
	// Backoff is the wait between retries when no Retry-After says
	// otherwise (a fixed wait: the suite's cases count attempts, not
	// backoff curves).
	Backoff time.Duration
}

// Backend opens queues of one implementation.
type Backend struct {
	// Name names the backend in test names.
	Name string
	// Open returns a new, empty queue configured by o, closed when the test
	// ends.
	Open func(t *testing.T, o Options) Queue
	// Reopen opens the queue at loc (a Queue's Location) configured by o,
	// in another process: the worker process of the takeover case.
	Reopen func(ctx context.Context, loc string, o Options) (Queue, error)
	// ChildTest is the name of the test function of the backend's test
	// binary that calls [Child] (for example "TestIntentConformanceChild").
	ChildTest string
}

// Queue is one backend's queue of intents, as the suite drives it.
type Queue interface {
	// Submit makes req an intent: when it returns, the intent is durable
	// and nothing has been sent.
	Submit(ctx context.Context, req *Request) (*Intent, error)
	// Work sends due intents, in this process, until ctx ends.
	Work(ctx context.Context) error
	// Get returns the intent as stored.
	Get(ctx context.Context, id string) (*Intent, error)
	// Wait blocks until the intent is terminal (a worker sends it) and
	// returns it.
	Wait(ctx context.Context, id string) (*Intent, error)
	// Stored returns every byte the backend holds about its intents (rows,
	// files, logs it keeps), for the credential check.
	Stored(ctx context.Context) ([]byte, error)
	// Location names the queue for Backend.Reopen in another process.
	Location() string
	// Close releases the queue (not the data).
	Close() error
}
