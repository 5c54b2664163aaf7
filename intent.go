package idemkit

import (
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/queue"
)

// IntentState is the state of an [Intent]. It is also the error of an
// intent that did not succeed: [Client.Do] and [Client.Wait] return an error
// matching its state (see [IntentState.Error]).
type IntentState string

const (
	// StatePending: no definitive answer yet. The intent is due at
	// NextAttemptAt (or is being sent by some process right now).
	StatePending IntentState = "pending"
	// StateSucceeded: the server answered 2xx, fresh or replayed.
	StateSucceeded IntentState = "succeeded"
	// StateFailed: a definitive answer that is not a success: a replayed
	// error, or a 4xx that is not retried ("key reused" included).
	StateFailed IntentState = "failed"
	// StateUnknown: the outcome is unknown. An attempt's answer was lost
	// (a timeout, a reset connection, a process interrupted or killed while
	// it waited), and the answer that came later says nothing about it: a
	// 401 or 403, a 400 or a proxy's error page that never reached the
	// idempotency layer, any other fresh (not replayed) answer that is not
	// a success. The first attempt may have taken effect. The intent is
	// never resent under a new key without an explicit override; reconcile
	// it with the server (resending under the same key, with working
	// credentials, gets the server's stored answer). Its Outcome is that
	// last answer; LastError names the attempt whose answer was lost.
	StateUnknown IntentState = "unknown"
	// StateExpired: the horizon passed without a definitive answer. The
	// outcome is unknown and needs reconciliation.
	StateExpired IntentState = "expired"
	// StateCanceled: canceled by the caller before a definitive answer.
	StateCanceled IntentState = "canceled"
)

func (s IntentState) valid() bool {
	switch s {
	case StatePending, StateSucceeded, StateFailed, StateUnknown, StateExpired, StateCanceled:
		return true
	}
	return false
}

// maxBodySize is the largest request body a [Request] may carry (10 MiB).
// Larger bodies are refused with [ErrInvalidRequest]; the stored response
// body of an Outcome is cut at the same size.
const maxBodySize = policy.MaxBodySize

// Request is what the caller wants sent, once, with one key.
type Request struct {
	// Method defaults to POST.
	Method string
	// URL must be absolute http or https, without user:password@.
	URL string
	// Header is sent with every attempt. Headers named in
	// Config.CredentialHeaders are never stored: this process keeps them in
	// memory for as long as it drives the intent, and a process that resumes
	// the intent later gets them from Config.SendHookFunc.
	Header http.Header
	// Body is sent with every attempt; at most 10 MiB.
	Body []byte
	// Key is the Idempotency-Key. When empty, an Idempotency-Key header is
	// used if present, else the intent id (a UUIDv7) is minted as the key, once.
	Key string
}

// Intent is one user action: one request, one key, driven to an outcome.
type Intent struct {
	// ID names the intent in its queue: a UUIDv7 (time-ordered; older queues
	// hold UUIDv4 ids, which stay valid). It is also the Key unless the
	// request brought its own.
	ID string
	// Key is the Idempotency-Key sent with every attempt.
	Key   string
	State IntentState

	Method string
	URL    string
	Header http.Header // as stored: without credential headers (see Config.CredentialHeaders)
	Body   []byte
	// Fingerprint is the SHA-256 of the method, URL and body. Submitting the
	// same key again with a different fingerprint is ErrKeyReused.
	Fingerprint []byte

	Attempts int
	// NextAttemptAt is when the next attempt may start: the due time, or,
	// while a process holds the intent's lease, the lease's end if later.
	NextAttemptAt time.Time
	// FirstAttemptAt is zero until the first attempt starts.
	FirstAttemptAt time.Time
	// Horizon is the last instant an attempt may start: FirstAttemptAt plus
	// the effective window minus the safety margin. Zero until the first
	// attempt; once set it only ever moves earlier.
	Horizon   time.Time
	CreatedAt time.Time
	UpdatedAt time.Time

	// Outcome is the definitive response; nil while pending, and for
	// expired or canceled intents. For an intent in StateUnknown it is the
	// last answer, which says nothing about the effect.
	Outcome *Outcome
	// LastError describes the last failed attempt or why the intent ended.
	LastError string
	// CredentialHeaders are the names (canonical, sorted) of the
	// credential headers the request had when it was queued: their values
	// were never stored, so a process resuming the intent must supply them
	// (Config.SendHookFunc). Nil if none (or queued before schema 5).
	CredentialHeaders []string

	// LeasedUntil is the end of the lease of the process sending the
	// intent right now (or sleeping between its attempts), zero when no
	// process holds it; HolderPID and HolderHost name that process (its
	// hostname) when it is known. A holder on this host that died is
	// taken over at once by the next Run, Drain, Do or Wait.
	LeasedUntil time.Time
	HolderPID   int
	HolderHost  string

	// Unanswered is the number of the first attempt whose answer was lost
	// although it may have reached the server (a timeout, a reset, a
	// process interrupted or killed mid-attempt; for a pending intent, the
	// attempt in flight right now counts too), or 0 if none. Attempts known
	// never to have left (connection refused, a send hook's refusal) do not
	// count. While it is not 0 a later answer that is not a success or a
	// replay cannot be trusted to mean "it did not happen": see
	// StateUnknown.
	Unanswered int

	// instance is the queue instance that queued it ("" if before 004).
	instance string
	// keyForm is how its key travels: "bare", "quoted", or "" (not sent
	// since schema 007).
	keyForm string
}

// Outcome is the definitive response to an intent.
type Outcome struct {
	Status int
	// Header is the response header as stored: the headers of
	// Config.OutcomeHeaders, the profile's replay markers, and
	// Idempotent-Response-Omitted ("true": the server replayed the status
	// and headers but had not stored the body, so Body is empty although
	// the original answer had one).
	Header http.Header
	Body   []byte
	// Replayed is true when the server marked the answer as a replay from
	// its idempotency store (Idempotent-Replayed: true, or the markers of
	// the host's Profile): the effect, if any, happened on an earlier
	// attempt, and the answer is final whatever its status.
	Replayed bool

	// keyReused: the host's profile read this answer as "key reused".
	keyReused bool
}

// Attempt is one entry of an intent's attempt log.
type Attempt struct {
	N          int
	Token      int64 // the lease's fencing token
	StartedAt  time.Time
	FinishedAt time.Time // zero if the process died mid-attempt
	Status     int       // 0 when there was no response
	Error      string
	Replayed   bool
	// NotSent is set when the attempt is known never to have left this
	// process (the connection was refused, the send hook refused it): its
	// missing answer hides no effect.
	NotSent bool
}

// ListOptions filters [Client.List]. The zero value lists the oldest 100
// intents of every state.
type ListOptions struct {
	// State keeps only intents in this state. Empty means every state.
	State IntentState
	// UpdatedSince keeps only intents last updated at or after this time.
	UpdatedSince time.Time
	// Limit is the maximum number of intents. Defaults to 100.
	Limit int
}

// intentOf is the intent as the queue returned it, as the API shows it.
func intentOf(qi *queue.Intent) *Intent {
	if qi == nil {
		return nil
	}
	in := &Intent{ID: qi.ID, Key: qi.Key, State: IntentState(qi.State), Method: qi.Method, URL: qi.URL,
		Header: qi.Header, Body: qi.Body, Fingerprint: qi.Fingerprint, Attempts: qi.Attempts,
		NextAttemptAt: qi.NextAttemptAt, FirstAttemptAt: qi.FirstAttemptAt, Horizon: qi.Horizon,
		CreatedAt: qi.CreatedAt, UpdatedAt: qi.UpdatedAt, LastError: qi.LastError,
		CredentialHeaders: qi.CredentialHeaders, LeasedUntil: qi.LeasedUntil, HolderPID: qi.HolderPID,
		HolderHost: qi.HolderHost, Unanswered: qi.Unanswered, instance: qi.Instance, keyForm: qi.KeyForm}
	if o := qi.Outcome; o != nil {
		in.Outcome = &Outcome{Status: o.Status, Header: o.Header, Body: o.Body, Replayed: o.Replayed, keyReused: o.KeyReused}
	}
	return in
}

// queued is in as the queue holds it (what Foreign reads).
func (in *Intent) queued() *queue.Intent {
	return &queue.Intent{ID: in.ID, State: queue.State(in.State), Instance: in.instance}
}

// storedOutcome is o as the queue stores it.
func storedOutcome(o *Outcome) *queue.Outcome {
	if o == nil {
		return nil
	}
	return &queue.Outcome{Status: o.Status, Header: o.Header, Body: o.Body, Replayed: o.Replayed, KeyReused: o.keyReused}
}

// attemptOf is an attempt log entry as the API shows it.
func attemptOf(a *queue.Attempt) *Attempt {
	return &Attempt{N: a.N, Token: a.Token, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Status: a.Status,
		Error: a.Error, Replayed: a.Replayed, NotSent: a.NotSent}
}
