package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; the root package re-exports the first two
// (idemkit.ErrNotFound, idemkit.ErrKeyReused).
var (
	// ErrNotFound: no intent has the given id.
	ErrNotFound = errors.New("idemkit: intent not found")
	// ErrKeyReused: a key already queued with a different request (or,
	// from the server, used with one).
	ErrKeyReused = errors.New("idemkit: idempotency key reused with a different request")
	// ErrLeaseLost: another process took the intent over (its lease ran
	// out) or it was canceled, so this process must stop driving it.
	ErrLeaseLost = errors.New("idemkit: lease lost")
	// ErrInMemory refuses a database that does not outlive its connection.
	ErrInMemory = errors.New("idemkit: the queue database is in memory (or temporary): an intent would vanish with the process; give Open a file path")
)

// Error is a problem with the queue file rather than with a request; the
// root package re-exports it as idemkit.QueueError (documented there). Its
// methods tell the problems apart (Locked is the one worth retrying).
type Error struct {
	// IntentID, Origin and Here are set for a Foreign intent: its id, and
	// the queue instance that queued it and this one, as "host|path".
	IntentID, Origin, Here string
	// Err is the cause: the driver's error, or what could not be decoded.
	Err error

	problem Problem
}

// Problem is what an Error is about.
type Problem int

// The problems of an Error.
const (
	Locked Problem = iota + 1
	ReadOnly
	Corrupt
	Foreign
	Newer
)

// Locked reports that another process held the queue file's write lock for
// longer than the busy timeout. Nothing was written; try again.
func (e *Error) Locked() bool { return e.problem == Locked }

// ReadOnly reports that the queue file, or the connection to it, is
// read-only (SQLite's SQLITE_READONLY). Nothing was written.
func (e *Error) ReadOnly() bool { return e.problem == ReadOnly }

// Corrupt reports that the queue file is not a SQLite database, is damaged,
// or holds a row this package cannot decode (named in Err). Open never
// rewrites such a file; a damaged row is set aside, the others are used.
func (e *Error) Corrupt() bool { return e.problem == Corrupt }

// Foreign reports a pending intent that was queued by the queue file at
// another host or path (the file was copied or moved), or that was never
// attempted in a queue file restored in place from an older backup (see
// Client.Adopt): it is not sent from here unless adopted with
// Client.Adopt. Client.Do and Client.Wait return it for such an intent,
// with IntentID, Origin and Here set.
//
//	if errors.As(err, &qe) && qe.Foreign() { /* check with the API whether it happened, then c.Adopt(ctx, qe.IntentID) */ }
func (e *Error) Foreign() bool { return e.problem == Foreign }

// Newer reports a queue file migrated by a newer version of this package,
// whose schema this one cannot write safely. Open refuses it, untouched.
func (e *Error) Newer() bool { return e.problem == Newer }

func (e *Error) Error() string {
	var what string
	switch e.problem {
	case Locked:
		what = "idemkit: queue file is locked by another process"
	case ReadOnly:
		what = "idemkit: queue file is read-only"
	case Corrupt:
		what = "idemkit: queue file is corrupt"
	case Foreign:
		if strings.Contains(e.Origin, restoredMark) {
			return fmt.Sprintf("idemkit: intent %s was never attempted in this queue file, but the file is older than its last use here (restored from a backup: %s): it may have been sent after the backup was taken; it is not sent unless adopted with Client.Adopt", e.IntentID, e.Origin)
		}
		return fmt.Sprintf("idemkit: intent %s was queued at %s, not here (%s): the queue file was copied or moved; it is not sent from here unless adopted with Client.Adopt", e.IntentID, e.Origin, e.Here)
	case Newer:
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
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an Error about p, its cause formatted (%w wraps).
func Errorf(p Problem, format string, args ...any) *Error {
	return &Error{problem: p, Err: fmt.Errorf(format, args...)}
}

// Is reports whether err is (or wraps) an Error about p.
func Is(err error, p Problem) bool {
	var qe *Error
	return errors.As(err, &qe) && qe.problem == p
}

// SQLite result codes the queue interprets (primary codes, low byte).
const (
	sqliteBusy     = 5
	sqliteLocked   = 6
	sqliteReadOnly = 8
	sqliteCorrupt  = 11
	sqliteNotADB   = 26
)

// Interpret translates driver errors at the queue boundary: by result
// code when the driver exposes one (modernc.org/sqlite), by message
// otherwise.
func Interpret(err error) error {
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
			return &Error{problem: Locked, Err: err}
		case sqliteReadOnly:
			return &Error{problem: ReadOnly, Err: err}
		case sqliteCorrupt, sqliteNotADB:
			return &Error{problem: Corrupt, Err: err}
		}
		return fmt.Errorf("idemkit: queue: %w", err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database is locked"), strings.Contains(msg, "SQLITE_BUSY"):
		return &Error{problem: Locked, Err: err}
	case strings.Contains(msg, "readonly database"):
		return &Error{problem: ReadOnly, Err: err}
	case strings.Contains(msg, "file is not a database"), strings.Contains(msg, "malformed"):
		return &Error{problem: Corrupt, Err: err}
	}
	return fmt.Errorf("idemkit: queue: %w", err)
}
