package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idemkit"
)

// queueFile is the resolved queue path and where it came from.
type queueFile struct {
	path string
	// isDefault: neither --queue nor IDEMKIT_QUEUE named it; its directory
	// is created on demand.
	isDefault bool
}

// queueFile resolves the queue: --queue, else $IDEMKIT_QUEUE, else
// $XDG_STATE_HOME/idemkit/queue.db, else ~/.local/state/idemkit/queue.db.
func (g *globals) queueFile(e *env) (queueFile, error) {
	if g.queue != "" {
		return queueFile{path: g.queue}, nil
	}
	if q := e.getenv(queueEnv); q != "" {
		return queueFile{path: q}, nil
	}
	if d := e.getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return queueFile{path: filepath.Join(d, "idemkit", "queue.db"), isDefault: true}, nil
	}
	if h := e.getenv("HOME"); h != "" && filepath.IsAbs(h) {
		return queueFile{path: filepath.Join(h, ".local", "state", "idemkit", "queue.db"), isDefault: true}, nil
	}
	return queueFile{}, usagef("no queue file: give --queue FILE or set %s (HOME and XDG_STATE_HOME are unset)", queueEnv)
}

// openMode says whether a missing queue file is created.
type openMode int

const (
	mustExist openMode = iota // ls, show, cancel, prune, retry: "no queue at PATH"
	mayCreate                 // do, submit, run
)

// errNoQueue is the error of a command that needs an existing queue.
var errNoQueue = errors.New("no queue")

// exists reports whether the queue file exists; an error is a file that
// cannot be looked at (permissions) or is not a regular file.
func (q queueFile) exists() (bool, error) {
	st, err := os.Stat(q.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("cannot open the queue %s: %s", q.path, words(err))
	case st.IsDir():
		return false, fmt.Errorf("the queue %s is a directory, not a queue file", q.path)
	}
	return true, nil
}

// open opens the queue with cfg. With mustExist, a missing file is
// errNoQueue and nothing is created.
func (q queueFile) open(ctx context.Context, mode openMode, cfg *idemkit.Config) (*idemkit.Client, error) {
	ok, err := q.exists()
	if err != nil {
		return nil, err
	}
	if !ok {
		if mode == mustExist {
			return nil, fmt.Errorf("%w at %s (do, submit and run create one; see --queue and $%s)", errNoQueue, q.path, queueEnv)
		}
		dir := filepath.Dir(q.path)
		if q.isDefault {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("cannot create the directory of the queue %s: %s", q.path, words(err))
			}
		}
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("cannot create the queue %s: the directory %s does not exist", q.path, dir)
		}
	}
	c, err := idemkit.Open(ctx, q.path, cfg)
	if err != nil {
		return nil, q.explain(err)
	}
	return c, nil
}

// openExisting resolves the queue and opens it if it exists (ls, show,
// cancel, prune, retry).
func (g *globals) openExisting(ctx context.Context, e *env) (*idemkit.Client, queueFile, error) {
	qf, err := g.queueFile(e)
	if err != nil {
		return nil, qf, err
	}
	c, err := qf.open(ctx, mustExist, nil)
	return c, qf, err
}

// queueError returns the *idemkit.QueueError err is or wraps, or nil.
func queueError(err error) *idemkit.QueueError {
	var qe *idemkit.QueueError
	if errors.As(err, &qe) {
		return qe
	}
	return nil
}

// isCorrupt reports a damaged queue file or row.
func isCorrupt(err error) bool {
	qe := queueError(err)
	return qe != nil && qe.Corrupt()
}

// explained is an SDK error in words: msg, still wrapping err.
type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }

// explain turns an error of idemkit.Open into words: no SQLite result
// codes.
func (q queueFile) explain(err error) error {
	qe := queueError(err)
	switch {
	case isCorrupt(err):
		return err // names the file and says "not a SQLite database" or what is damaged
	case qe != nil && qe.Locked():
		return explained{fmt.Sprintf("the queue %s is locked by another process (waited 5s); try again: idemkit: queue file is locked by another process", q.path), err}
	case qe != nil && qe.ReadOnly():
		return explained{fmt.Sprintf("the queue %s is read-only (check the permissions of the file and its directory): idemkit: queue file is read-only", q.path), err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case strings.Contains(err.Error(), "unable to open database file"), strings.Contains(err.Error(), "(14)"):
		return fmt.Errorf("cannot open the queue %s: check that the file and its directory exist and are readable and writable", q.path)
	}
	return err
}

// words is an OS error without its Go wrapping ("open x: permission
// denied" becomes "permission denied").
func words(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
