package idemkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	ErrKeyReused = errors.New("idemkit: idempotency key reused with a different request")
	// ErrNotFound is returned by [Client.Get], [Client.Wait] and
	// [Client.Cancel] when no intent has the given id.
	ErrNotFound = errors.New("idemkit: intent not found")
	// ErrInvalidRequest means a [Request] was refused before it was queued:
	// a bad method or URL, credentials in the URL, an invalid header or
	// key, or a body over 10 MiB. Nothing is written.
	ErrInvalidRequest = errors.New("idemkit: invalid request")
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
type QueueError struct {
	// IntentID, Origin and Here are set for a Foreign intent: its id, and
	// the queue instance that queued it and this one, as "host|path".
	IntentID, Origin, Here string
	// Err is the cause: the driver's error, or what could not be decoded.
	Err error

	problem queueProblem
}

// queueProblem is what a QueueError is about.
type queueProblem int

const (
	queueLocked queueProblem = iota + 1
	queueReadOnly
	queueCorrupt
	queueForeign
	queueNewer
)

// Locked reports that another process held the queue file's write lock for
// longer than the busy timeout. Nothing was written; try again.
func (e *QueueError) Locked() bool { return e.problem == queueLocked }

// ReadOnly reports that the queue file, or the connection to it, is
// read-only (SQLite's SQLITE_READONLY). Nothing was written.
func (e *QueueError) ReadOnly() bool { return e.problem == queueReadOnly }

// Corrupt reports that the queue file is not a SQLite database, is damaged,
// or holds a row this package cannot decode (named in Err). Open never
// rewrites such a file; a damaged row is set aside, the others are used.
func (e *QueueError) Corrupt() bool { return e.problem == queueCorrupt }

// Foreign reports a pending intent that was queued by the queue file at
// another host or path (the file was copied or moved), or that was never
// attempted in a queue file restored in place from an older backup (see
// Client.Adopt): it is not sent from here unless adopted with
// [Client.Adopt]. [Client.Do] and [Client.Wait]
// return it for such an intent, with IntentID, Origin and Here set.
//
//	if errors.As(err, &qe) && qe.Foreign() { /* check with the API whether it happened, then c.Adopt(ctx, qe.IntentID) */ }
func (e *QueueError) Foreign() bool { return e.problem == queueForeign }

// Newer reports a queue file migrated by a newer version of this package,
// whose schema this one cannot write safely. Open refuses it, untouched.
func (e *QueueError) Newer() bool { return e.problem == queueNewer }

func (e *QueueError) Error() string {
	var what string
	switch e.problem {
	case queueLocked:
		what = "idemkit: queue file is locked by another process"
	case queueReadOnly:
		what = "idemkit: queue file is read-only"
	case queueCorrupt:
		what = "idemkit: queue file is corrupt"
	case queueForeign:
		if strings.Contains(e.Origin, restoredMark) {
			return fmt.Sprintf("idemkit: intent %s was never attempted in this queue file, but the file is older than its last use here (restored from a backup: %s): it may have been sent after the backup was taken; it is not sent unless adopted with Client.Adopt", e.IntentID, e.Origin)
		}
		return fmt.Sprintf("idemkit: intent %s was queued at %s, not here (%s): the queue file was copied or moved; it is not sent from here unless adopted with Client.Adopt", e.IntentID, e.Origin, e.Here)
	case queueNewer:
		what = "idemkit: queue file was migrated by a newer version"
	default:
		what = "idemkit: queue file"
	}
	if e.Err == nil {
		return what
	}
	return what + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *QueueError) Unwrap() error { return e.Err }

// queueErrorf returns a QueueError about p, its cause formatted (%w wraps).
func queueErrorf(p queueProblem, format string, args ...any) *QueueError {
	return &QueueError{problem: p, Err: fmt.Errorf(format, args...)}
}

// isQueue reports whether err is (or wraps) a QueueError about p.
func isQueue(err error, p queueProblem) bool {
	var qe *QueueError
	return errors.As(err, &qe) && qe.problem == p
}

// errLeaseLost is internal: another process took the intent over (its lease
// ran out) or it was canceled, so this process must stop driving it.
var errLeaseLost = errors.New("idemkit: lease lost")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}

// SQLite result codes the queue interprets (primary codes, low byte).
const (
	sqliteBusy     = 5
	sqliteLocked   = 6
	sqliteReadOnly = 8
	sqliteCorrupt  = 11
	sqliteNotADB   = 26
)

// interpretError translates driver errors at the queue boundary: by result
// code when the driver exposes one (modernc.org/sqlite), by message
// otherwise.
func interpretError(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if strings.HasPrefix(err.Error(), "idemkit") {
		return err // ours already (a sentinel, or interpreted before)
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case sqliteBusy, sqliteLocked:
			return &QueueError{problem: queueLocked, Err: err}
		case sqliteReadOnly:
			return &QueueError{problem: queueReadOnly, Err: err}
		case sqliteCorrupt, sqliteNotADB:
			return &QueueError{problem: queueCorrupt, Err: err}
		}
		return fmt.Errorf("idemkit: queue: %w", err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database is locked"), strings.Contains(msg, "SQLITE_BUSY"):
		return &QueueError{problem: queueLocked, Err: err}
	case strings.Contains(msg, "readonly database"):
		return &QueueError{problem: queueReadOnly, Err: err}
	case strings.Contains(msg, "file is not a database"), strings.Contains(msg, "malformed"):
		return &QueueError{problem: queueCorrupt, Err: err}
	}
	return fmt.Errorf("idemkit: queue: %w", err)
}
