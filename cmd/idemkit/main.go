// Command idemkit queues HTTP requests with an idempotency key, persisted in
// a SQLite file before the first byte is sent, and sends them until the
// server gives a definitive answer or the key's retention window runs out.
//
//	idemkit submit --queue q.db --url https://api.example.com/charges -H 'Content-Type: application/json' --data '{"amount":4000}'
//	idemkit run --queue q.db --until-done -H 'Authorization: Bearer sk_test_123'
//	idemkit ls --queue q.db --json
//	idemkit show --queue q.db ID
//	idemkit do --url https://api.example.com/charges --data @charge.json -H 'Authorization: Bearer sk_test_123'
//
// Exit status: 0 on success, 1 on an error, 2 on a usage error, 3 when an
// intent ended failed, expired or canceled.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// Exit statuses.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2
	exitOutcome = 3
)

// defaultDoQueue is the queue file of `idemkit do` without --queue.
const defaultDoQueue = "idemkit-queue.db"

// exitError carries an exit status through cobra.
type statusError struct {
	code int
	err  error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	if msg := err.Error(); strings.HasPrefix(msg, "idemkit: ") {
		fmt.Fprintln(stderr, msg)
	} else {
		fmt.Fprintln(stderr, "idemkit:", msg)
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.code
	}
	var re *idemkit.ResultError
	if errors.As(err, &re) {
		return exitOutcome
	}
	if isUsage(err) {
		return exitUsage
	}
	return exitError
}

type usageError struct{ error }

func isUsage(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return true
	}
	// Errors of cobra's own checks (required flags, arguments, commands).
	msg := err.Error()
	for _, p := range []string{"required flag", "unknown command", "accepts ", "requires at least", "unknown flag", "unknown shorthand"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "idemkit",
		Short: "Send HTTP requests exactly once: one idempotency key per intent, persisted before the first attempt",
		Long: `idemkit queues HTTP requests in a SQLite file, each with one Idempotency-Key minted
once and written to disk before the first byte is sent, and retries them with that same key
(backoff with jitter, Retry-After, 409 "in progress") until the server answers definitively
or the key's retention window runs out. Credentials given with -H 'Authorization: ...' are
never written to the queue.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newSubmitCmd(), newRunCmd(), newLsCmd(), newShowCmd(), newDoCmd(), newCancelCmd(), newPruneCmd())
	return root
}
