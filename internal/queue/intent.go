package queue

import (
	"net/http"
	"time"
)

// State is an intent's state as stored (idemkit.IntentState).
type State string

// The states of an intent.
const (
	Pending   State = "pending"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Unknown   State = "unknown"
	Expired   State = "expired"
	Canceled  State = "canceled"
)

// Valid reports whether s is a state.
func (s State) Valid() bool {
	switch s {
	case Pending, Succeeded, Failed, Unknown, Expired, Canceled:
		return true
	}
	return false
}

// Intent is an intents row, decoded (idemkit.Intent, plus what the root
// keeps unexported).
type Intent struct {
	ID, Key           string
	State             State
	Method, URL       string
	Header            http.Header
	Body              []byte
	Fingerprint       []byte
	Attempts          int
	NextAttemptAt     time.Time
	FirstAttemptAt    time.Time
	Horizon           time.Time
	CreatedAt         time.Time
	UpdatedAt         time.Time
	Outcome           *Outcome
	LastError         string
	CredentialHeaders []string
	LeasedUntil       time.Time
	HolderPID         int
	HolderHost        string
	Unanswered        int
	// Instance is the queue instance that queued it ("" if before 004).
	Instance string
	// KeyForm is how its key travels: "bare", "quoted", or "" (not sent
	// since schema 007).
	KeyForm string
}

// Outcome is an intent's stored answer.
type Outcome struct {
	Status   int
	Header   http.Header
	Body     []byte
	Replayed bool
	// KeyReused: the host's profile read this answer as "key reused".
	KeyReused bool
}

// Attempt is one entry of an intent's attempt log (idemkit.Attempt).
type Attempt struct {
	N          int
	Token      int64
	StartedAt  time.Time
	FinishedAt time.Time
	Status     int
	Error      string
	Replayed   bool
	NotSent    bool
}

// NewIntent is a validated request to queue.
type NewIntent struct {
	ID, Key, Method, URL string
	// Host is scheme://host, lowercased (idemkit_hosts names hosts so).
	Host        string
	Header      http.Header
	Body        []byte
	Fingerprint []byte
	// CredentialHeaders are the names of the credential headers kept out
	// of the queue, sorted; nil if none.
	CredentialHeaders []string
	// Now is when it is queued.
	Now time.Time
}
