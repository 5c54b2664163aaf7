package idemriver

import (
	"net/http"
	"time"
)

// Request is what the caller wants sent, once, with one key.
type Request struct {
	// Method defaults to POST.
	Method string
	// URL must be absolute http or https, without user:password@.
	URL string
	// Header is sent with every attempt. Credential headers
	// (Config.CredentialHeaders) are dropped at submit: Config.SendHookFunc
	// supplies them.
	Header http.Header
	// Body is sent with every attempt; at most 10 MiB.
	Body []byte
	// Key is the idempotency key. When empty, an Idempotency-Key header is
	// used if present, else the intent id (a UUIDv7) is minted as the key,
	// once.
	Key string
}

// State is the state of an intent, spelled as package idemkit spells it.
type State string

// The states of an intent (see package idemkit's IntentState for what each
// means).
const (
	StatePending   State = "pending"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateUnknown   State = "unknown"
	StateExpired   State = "expired"
	StateCanceled  State = "canceled"
)

// Error returns the state's name: a State is also the error Wait returns for
// an intent that did not succeed.
func (s State) Error() string { return string(s) }

// terminal reports whether s is a final state.
func (s State) terminal() bool { return s != StatePending && s != "" }

// Intent is one user action: one request, one key, driven to an outcome by
// River workers.
type Intent struct {
	// ID names the intent: a UUIDv7, also the Key unless the request
	// brought its own.
	ID string
	// Key is the idempotency key sent with every attempt.
	Key string
	// JobID is the River job that carries the intent.
	JobID int64
	State State

	Method string
	URL    string
	Header http.Header // as stored: without credential headers
	Body   []byte
	// CredentialHeaders are the names of the credential headers the
	// request had when it was submitted (their values were dropped).
	CredentialHeaders []string

	// Attempts is the number of attempts started.
	Attempts int
	// FirstAttemptAt is zero until the first attempt starts.
	FirstAttemptAt time.Time
	// Horizon is the last instant an attempt may start; zero until the
	// first attempt.
	Horizon time.Time
	// NextAttemptAt is when the job is due (River's scheduled_at) while
	// pending.
	NextAttemptAt time.Time
	CreatedAt     time.Time
	// Outcome is the last answer: the definitive one for a succeeded or
	// failed intent, the one that says nothing about a lost attempt for an
	// unknown one; nil while pending and for expired or canceled intents.
	Outcome *Outcome
	// LastError describes the last failed attempt or why the intent ended.
	LastError string
	// Unanswered is the first attempt whose answer was lost although it may
	// have reached the server, 0 if none.
	Unanswered int
}

// Outcome is a response to an intent, as stored.
type Outcome struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Replayed is set when the server marked the answer as a replay.
	Replayed bool `json:"replayed,omitempty"`
	// KeyReused is set when the answer says the key was used with another
	// request.
	KeyReused bool `json:"key_reused,omitempty"`
}

// intentKind is the River job kind of an intent.
const intentKind = "idemkit_intent"

// intentArgs are the River job args of an intent: the request as stored.
type intentArgs struct {
	ID  string `json:"id"`
	Key string `json:"key" river:"unique"`
	// KeyQuoted fixes the key's form at submit (the host profile's
	// KeyQuoted then): it never changes for an intent.
	KeyQuoted         bool        `json:"key_quoted,omitempty"`
	Method            string      `json:"method"`
	URL               string      `json:"url"`
	Header            http.Header `json:"header,omitempty"`
	Body              []byte      `json:"body,omitempty"`
	CredentialHeaders []string    `json:"credential_headers,omitempty"`
}

// Kind is the River job kind.
func (intentArgs) Kind() string { return intentKind }

// progressKey is the job metadata key of the intent's progress.
const progressKey = "idemkit"

// progress is what the workers record on the job, under progressKey.
type progress struct {
	// State is set when the intent ended.
	State State `json:"state,omitempty"`
	// Attempts is the number of attempts started.
	Attempts       int       `json:"attempts"`
	FirstAttemptAt time.Time `json:"first_attempt_at,omitzero"`
	Horizon        time.Time `json:"horizon,omitzero"`
	// Starts are the start times of the last attempts (at most
	// MaxAttemptsPerHour of them), for the budget.
	Starts []time.Time `json:"starts,omitempty"`
	// RiverAttempt is River's attempt number once this progress is
	// applied (a snooze gives one back): a run River counts beyond it
	// recorded no result (its worker died, perhaps mid-request).
	RiverAttempt int `json:"river_attempt"`
	// Unanswered is the first attempt whose answer was lost.
	Unanswered int `json:"unanswered,omitempty"`
	// Waits counts the retries so far, for the backoff.
	Waits     int    `json:"waits,omitempty"`
	LastError string `json:"last_error,omitempty"`
}
