package idemkit

import (
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/queue"
)

// Sentinel errors, matched with errors.Is. The error of an intent that did
// not succeed is its [IntentState]; a problem with the queue file is a
// [*QueueError].
var (
	// ErrKeyReused means the server said the key was used before with a
	// different request, as the host's [Profile] spells it (the idemkit
	// server: 422 with its key-reused problem type; Stripe: 400
	// idempotency_error; the IETF draft: 422). The intent ends
	// [StateFailed], and its error matches both. (A replayed answer never
	// means this: it is the handler's own stored answer to this request.)
	// Submit also returns it, without sending anything, when a
	// caller-supplied key is already in the queue with a different request.
	//
	//	if errors.Is(err, idemkit.ErrKeyReused) { /* a bug in the caller: mint a new key per intent */ }
	ErrKeyReused = queue.ErrKeyReused
	// ErrNotFound is returned by [Client.Get], [Client.Wait] and
	// [Client.Cancel] when no intent has the given id.
	ErrNotFound = queue.ErrNotFound
	// ErrInvalidRequest means a [Request] was refused before it was queued:
	// a bad method or URL, credentials in the URL, an invalid header or
	// key, or a body over 10 MiB. Nothing is written.
	ErrInvalidRequest = policy.ErrInvalidRequest
	// ErrClosed is returned by every method of a [Client] after Close.
	ErrClosed = errors.New("idemkit: client closed")
)

// Error returns the state's name, as String would: an IntentState is also
// the error of an intent left in it. [Client.Do]
// and [Client.Wait] return an error matching the intent's state, with
// errors.Is, when it did not succeed:
//
//   - [StateFailed]: the server gave a definitive answer that is not a
//     success (a replayed error, a 3xx, or a 4xx that is not retried: see
//     [DefaultCheckRetry] and [Profile]; a reused key also matches
//     [ErrKeyReused]), or the retry policy gave up on a permanent error.
//     The intent's Outcome holds the response, if there was one.
//   - [StateUnknown]: an attempt's answer was lost, and a later answer
//     (a 401, a proxy's error page, …) says nothing about it: the effect
//     may have happened. Reconcile; never resend under a new key blindly.
//   - [StateExpired]: the horizon passed without a definitive answer. The
//     effect may or may not have happened: the intent needs
//     reconciliation. It is never re-sent with a new key.
//   - [StateCanceled]: the intent was canceled with [Client.Cancel] before
//     a definitive answer arrived.
//   - [StatePending]: Do stopped with the intent still pending because
//     Config.MaxAttempts attempts of this Client got no definitive answer;
//     Run, Drain or Wait (this process or a later one) resume it.
//
// The error's text names the intent (id, key, attempts, status, last
// error).
//
//	switch in, err := c.Do(ctx, req); {
//	case errors.Is(err, idemkit.StateExpired): // unknown outcome: reconcile in
//	}
func (s IntentState) Error() string { return string(s) }

// String returns the state's name.
func (s IntentState) String() string { return string(s) }

// describe says in words what an intent left in state s means.
func (s IntentState) describe() string {
	switch s {
	case StateFailed:
		return "idemkit: request failed"
	case StateUnknown:
		return "idemkit: outcome unknown: an attempt's answer was lost and a later answer says nothing about it"
	case StateExpired:
		return "idemkit: retry horizon passed without a definitive answer"
	case StateCanceled:
		return "idemkit: intent canceled"
	case StatePending:
		return "idemkit: intent pending"
	}
	return "idemkit: intent " + string(s)
}

// errMaxAttempts is why Do returns an intent still pending.
var errMaxAttempts = errors.New("idemkit: Config.MaxAttempts reached; the intent stays pending")

// resultError is the error of an intent that did not succeed: it matches
// its state (errors.Is) and wraps cause, if any (ErrKeyReused,
// errMaxAttempts). in is the intent as stored, if it could be read.
type resultError struct {
	state IntentState
	in    *Intent
	cause error
}

// resultOf is the resultError of in, left in its state by cause.
func resultOf(in *Intent, cause error) *resultError {
	return &resultError{state: in.State, in: in, cause: cause}
}

func (e *resultError) Error() string {
	what := e.state.describe()
	if e.cause != nil {
		what = e.cause.Error()
	}
	if e.in == nil {
		return what
	}
	msg := fmt.Sprintf("%s (intent %s, key %s, %d attempt(s)", what, e.in.ID, e.in.Key, e.in.Attempts)
	if e.in.Outcome != nil {
		msg += fmt.Sprintf(", status %d", e.in.Outcome.Status)
	}
	if e.in.LastError != "" {
		msg += ", last error: " + e.in.LastError
	}
	return msg + ")"
}

// Is reports whether target is the intent's state.
func (e *resultError) Is(target error) bool {
	s, ok := target.(IntentState)
	return ok && s == e.state
}

func (e *resultError) Unwrap() error { return e.cause }

// QueueError is a problem with the queue file rather than with a request.
// Its methods tell the problems apart (Locked is the one worth retrying);
// match it with errors.As:
//
//	var qe *idemkit.QueueError
//	if errors.As(err, &qe) && qe.Locked() { /* another process holds the queue: try again */ }
//
// Its methods: Locked (another process held the queue file's write lock
// for longer than the busy timeout; nothing was written; try again),
// ReadOnly (the file or connection is read-only), Corrupt (not a SQLite
// database, damaged, or a row that cannot be decoded, named in Err; a
// damaged row is set aside), Foreign (a pending intent queued by the file
// at another host or path, or never attempted in a file restored in place
// from an older backup: not sent from here unless adopted with
// [Client.Adopt]; Do and Wait return it with IntentID, Origin and Here
// set), Newer (a queue file migrated by a newer version: Open refuses it,
// untouched). Its fields: IntentID, Origin, Here (a Foreign intent), Err
// (the cause).
type QueueError = queue.Error

// errLeaseLost is internal: another process took the intent over (its lease
// ran out) or it was canceled, so this process must stop driving it.
var errLeaseLost = queue.ErrLeaseLost

func invalidf(format string, args ...any) error { return policy.Invalidf(format, args...) }
