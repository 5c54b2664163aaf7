package idemkit

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; the typed [*ResultError]
// returned by [Client.Do] and [Client.Wait] wraps one of the outcome
// sentinels and carries the [Intent].
var (
	// ErrKeyReused means the server said the key was used before with a
	// different request, as the host's [Profile] spells it (the idemkit
	// server: 422 with its key-reused problem type; Stripe: 400
	// idempotency_error; the IETF draft: 422). The intent ends
	// [StateFailed]. (A replayed answer never means this: it is the
	// handler's own stored answer to this request: ErrFailed.) Submit also
	// returns it, without sending anything, when a caller-supplied key is
	// already in the queue with a different request.
	//
	//	if errors.Is(err, idemkit.ErrKeyReused) { /* a bug in the caller: mint a new key per intent */ }
	ErrKeyReused = errors.New("idemkit: idempotency key reused with a different request")

	// ErrFailed means the server gave a definitive answer that is not a
	// success (a replayed error, a 3xx, or a 4xx that is not retried: see
	// [DefaultCheckRetry] and [Profile]), or the
	// retry policy gave up on a permanent error. The intent ends
	// [StateFailed] and its Outcome holds the response, if there was one.
	ErrFailed = errors.New("idemkit: request failed")

	// ErrWindowExpired means the horizon passed without a definitive answer.
	// The effect may or may not have happened: the intent ends
	// [StateExpired] and needs reconciliation. It is never re-sent with a
	// new key.
	//
	//	if errors.Is(err, idemkit.ErrWindowExpired) { /* ask the server, or a human */ }
	ErrWindowExpired = errors.New("idemkit: retry horizon passed without a definitive answer")

	// ErrCanceled means the intent was canceled with [Client.Cancel] before
	// a definitive answer arrived.
	ErrCanceled = errors.New("idemkit: intent canceled")

	// ErrNotFound is returned by [Client.Get], [Client.Wait] and
	// [Client.Cancel] when no intent has the given id.
	ErrNotFound = errors.New("idemkit: intent not found")

	// ErrInvalidRequest means a [Request] was refused before it was queued:
	// a bad method or URL, credentials in the URL, an invalid header or
	// key, or a body over 10 MiB. Nothing is written.
	ErrInvalidRequest = errors.New("idemkit: invalid request")

	// ErrQueueCorrupt means the queue file is not a SQLite database, is
	// damaged, or holds a row the client cannot decode. Open never rewrites
	// such a file.
	ErrQueueCorrupt = errors.New("idemkit: queue file is corrupt")

	// ErrQueueLocked means another process held the queue file's write lock
	// for longer than the busy timeout. Nothing was written; try again.
	ErrQueueLocked = errors.New("idemkit: queue file is locked by another process")

	// ErrQueueReadOnly means the queue file or the connection to it is
	// read-only (SQLite's SQLITE_READONLY): nothing was written.
	ErrQueueReadOnly = errors.New("idemkit: queue file is read-only")

	// ErrMaxAttempts is returned by [Client.Do] with the intent, still
	// pending, when Config.MaxAttempts attempts of this Client got no
	// definitive answer.
	//
	//	if errors.Is(err, idemkit.ErrMaxAttempts) { /* resume it later: Run, Drain or Wait */ }
	ErrMaxAttempts = errors.New("idemkit: Config.MaxAttempts reached; the intent stays pending")

	// ErrClosed is returned by every method of a [Client] after Close.
	ErrClosed = errors.New("idemkit: client closed")
)

// ResultError is the error of an intent that reached a terminal state other
// than [StateSucceeded]: Err is [ErrKeyReused], [ErrFailed],
// [ErrWindowExpired] or [ErrCanceled], and Intent is the intent as stored,
// with its Outcome when the server answered.
//
//	var re *idemkit.ResultError
//	if errors.As(err, &re) { log.Println(re.Intent.ID, re.Intent.LastError) }
type ResultError struct {
	Intent *Intent
	Err    error
}

func (e *ResultError) Error() string {
	msg := fmt.Sprintf("%v (intent %s, key %s, %d attempt(s)", e.Err, e.Intent.ID, e.Intent.Key, e.Intent.Attempts)
	if e.Intent.Outcome != nil {
		msg += fmt.Sprintf(", status %d", e.Intent.Outcome.Status)
	}
	if e.Intent.LastError != "" {
		msg += ", last error: " + e.Intent.LastError
	}
	return msg + ")"
}

// Unwrap returns Err.
func (e *ResultError) Unwrap() error { return e.Err }

// errLeaseLost is internal: another process took the intent over (its lease
// ran out) or it was canceled, so this process must stop driving it.
var errLeaseLost = errors.New("idemkit: lease lost")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
}
