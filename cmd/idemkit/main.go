// Command idemkit queues HTTP requests with an idempotency key, persisted in
// a SQLite file before the first byte is sent, and sends them until the
// server gives a definitive answer or the key's retention window runs out.
//
//	idemkit do --url https://api.example.com/charges --data @charge.json -H 'Authorization: Bearer sk_test_123'
//	idemkit submit --url https://api.example.com/charges -H 'Content-Type: application/json' --data '{"amount":4000}'
//	idemkit run --until-done -H 'Authorization: Bearer sk_test_123'
//	idemkit ls --json
//	idemkit show ID-PREFIX
//
// The queue is --queue, else $IDEMKIT_QUEUE, else
// $XDG_STATE_HOME/idemkit/queue.db (~/.local/state/idemkit/queue.db).
//
// Exit status (see exitHelp): 0 done, 1 usage or local error, 2 interrupted
// with work left, 3 a definitive failure of this run's intents, 4 the
// outcome of an intent of this run is unknown (unknown or expired), 130
// SIGINT.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// Exit statuses.
const (
	exitOK          = 0
	exitError       = 1 // a usage error, or a local one (queue file, flags, network setup)
	exitInterrupted = 2 // stopped (SIGTERM, --timeout, --max-attempts) with work left
	exitFailed      = 3 // an intent of this run ended failed or canceled, or its key was reused
	exitExpired     = 4 // an intent of this run ended unknown or expired: the outcome is unknown
	exitSIGINT      = 130
)

// exitHelp documents the exit statuses in every command's --help.
const exitHelp = `Exit status:
  0    done: every intent this run handled succeeded
  1    usage error, or a local one (queue file, flags)
  2    interrupted (SIGTERM, --timeout, --max-attempts) with work left: it stays queued
  3    definitive failure: an intent ended failed (a 4xx, a key reused with a different
       request, here or on the server) or canceled
  4    outcome unknown: an intent ended "unknown" (an attempt's answer was lost and a later
       answer, such as a 401 or a proxy's error page, says nothing about it) or "expired"
       (the retry horizon passed without a definitive answer). It may have taken effect:
       reconcile with the server; 'idemkit retry' refuses it (a new key could do it twice)
  130  SIGINT (Ctrl-C); work left stays queued`

// queueEnv names the queue file when --queue is not given.
const queueEnv = "IDEMKIT_QUEUE"

// statusError carries an exit status through cobra.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// signalError is the cause of the command context when a signal stopped it.
type signalError struct{ name string }

func (e *signalError) Error() string { return "interrupted (" + e.name + ")" }

// errSIGINT and errSIGTERM are the causes main gives the context.
var (
	errSIGINT  = &signalError{"SIGINT"}
	errSIGTERM = &signalError{"SIGTERM"}
)

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		stdoutTTY: isTerminal(os.Stdout), stderrTTY: isTerminal(os.Stderr)}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		if s == os.Interrupt {
			cancel(errSIGINT)
		} else {
			cancel(errSIGTERM)
		}
		// A second signal does not wait for the clean stop, but what must
		// be said (the intent that stays queued, how to resume it) is.
		<-sigs
		e.sayLastWords()
		os.Exit(exitSIGINT)
	}()
	os.Exit(e.run(ctx, os.Args[1:]))
}

// env is what a command line runs with: the standard streams and the
// environment (injected for tests).
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// stdoutTTY ends a response body without a final newline with one (a
	// pipe gets the body byte for byte); stderrTTY makes progress lines
	// redraw in place.
	stdoutTTY, stderrTTY bool

	// lastWords, if set, is what must be printed even when a second signal
	// exits at once (do: the intent id and the resume command); said
	// records that it was printed, by either path.
	wordsMu   sync.Mutex
	lastWords func() string
	said      bool
}

// setLastWords sets what sayLastWords prints.
func (e *env) setLastWords(f func() string) {
	e.wordsMu.Lock()
	defer e.wordsMu.Unlock()
	e.lastWords = f
}

// sayLastWords prints the last words on stderr, once.
func (e *env) sayLastWords() {
	e.wordsMu.Lock()
	defer e.wordsMu.Unlock()
	if e.said || e.lastWords == nil {
		return
	}
	e.said = true
	printErr(e.stderr, errors.New(e.lastWords()))
}

// sayInstead prints err on stderr in place of the last words, unless a
// second signal printed those already: under the same lock, so a second
// signal arriving meanwhile waits for it to be written before it exits.
func (e *env) sayInstead(err error) {
	e.wordsMu.Lock()
	defer e.wordsMu.Unlock()
	if !e.said {
		printErr(e.stderr, err)
	}
	e.said = true
}

// run executes the command line args and returns the exit status. A
// context canceled with errSIGINT as its cause exits 130.
func (e *env) run(ctx context.Context, args []string) int {
	root := newRootCmd(e)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if errors.Is(context.Cause(ctx), errSIGINT) {
		if err != nil {
			printErr(e.stderr, err)
		}
		return exitSIGINT
	}
	if err == nil {
		return exitOK
	}
	printErr(e.stderr, err)
	return exitCode(err)
}

func printErr(w io.Writer, err error) {
	msg := err.Error()
	if msg == "" {
		return
	}
	if !strings.HasPrefix(msg, "idemkit: ") {
		msg = "idemkit: " + msg
	}
	fmt.Fprintln(w, msg)
}

// exitCode classifies an error returned by a command.
func exitCode(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.code
	}
	return outcomeCode(err)
}

// outcomeCode is the exit status of an SDK error: 3 for a definitive
// failure (a server 422 and a key reused in the local queue alike), 4 for
// an intent whose outcome is unknown (unknown, expired), 1 otherwise.
func outcomeCode(err error) int {
	switch {
	case errors.Is(err, idemkit.StateExpired), errors.Is(err, idemkit.StateUnknown):
		return exitExpired
	case errors.Is(err, idemkit.ErrKeyReused), errors.Is(err, idemkit.StateFailed), errors.Is(err, idemkit.StateCanceled):
		return exitFailed
	}
	return exitError
}

// usagef is a usage error: exit status 1, like every local error.
func usagef(format string, args ...any) error {
	return &statusError{code: exitError, err: fmt.Errorf(format, args...)}
}

// globals are the flags every command has.
type globals struct {
	queue   string
	json    bool
	verbose bool
}

func newRootCmd(e *env) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "idemkit",
		Short: "Send HTTP requests exactly once: one idempotency key per intent, persisted before the first attempt",
		Long: `idemkit queues HTTP requests in a SQLite file, each with one Idempotency-Key minted
once and written to disk before the first byte is sent, and retries them with that same key
(backoff with jitter, Retry-After, 409 "in progress") until the server answers definitively
or the key's retention window runs out. Credentials given with -H 'Authorization: ...' are
never written to the queue.

The queue file is --queue, else $` + queueEnv + `, else $XDG_STATE_HOME/idemkit/queue.db
(~/.local/state/idemkit/queue.db when XDG_STATE_HOME is unset). Only do, submit and run
create it; the other commands report "no queue at PATH".

` + exitHelp,
		Version:       versionString(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate(versionTemplate)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &statusError{code: exitError, err: err} })
	pf := root.PersistentFlags()
	pf.StringVarP(&g.queue, "queue", "q", "", "queue file (default $"+queueEnv+", else $XDG_STATE_HOME/idemkit/queue.db, else ~/.local/state/idemkit/queue.db)")
	pf.BoolVar(&g.json, "json", false, "print JSON: one object per line on stdout")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "show every attempt and why it was retried (stderr)")
	root.Flags().Bool("version", false, "print the module version and the queue schema version")
	root.AddCommand(newSubmitCmd(e, g), newRunCmd(e, g), newLsCmd(e, g), newShowCmd(e, g), newDoCmd(e, g),
		newCancelCmd(e, g), newPruneCmd(e, g), newRetryCmd(e, g))
	for _, c := range root.Commands() {
		long := c.Long
		if long == "" {
			long = c.Short + "."
		}
		c.Long = long + "\n\n" + exitHelp
	}
	root.AddCommand(newCheckCmd(e, g)) // after the loop: check documents exit statuses of its own
	root.AddCommand(newStoreCmd(e, g)) // after the loop: the store commands document their own exit statuses
	// After the loop, like check: reconcile documents its own exit statuses.
	root.AddCommand(newReconcileCmd(e, g))
	return root
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
