// Command killresume is idemkit's main demo: a client process is SIGKILLed
// while its 40.00 USD payment is in flight, is restarted, and the customer is
// charged exactly once. The same scenario with a naive client (a new key per
// attempt) charges twice.
//
//	go run ./examples/killresume [--dsn postgres://...] [--delay 3s] [--keep] [--verbose]
//
// It needs no setup: it runs the payments API of internal/paymentsapi on an
// embedded SQLite file (or on PostgreSQL with --dsn) in a child process, and
// the clients in more child processes, all of them this very binary
// re-executed in another role. It narrates a timeline, prints a VERDICT line
// and exits 0 only if the idemkit client charged exactly once. Every process
// and temporary file it starts is removed at the end, also on Ctrl-C. See
// README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// roleEnv selects the role of a child process. The demo sets it when it
// re-executes itself; people never do.
const roleEnv = "IDEMKIT_KILLRESUME_ROLE"

// Roles of a child process.
const (
	roleServer = "server"
	roleClient = "client"
	roleNaive  = "naive"
)

// delayDefault is the default of --delay: how long the server holds each
// payment handler, the window in which the client is killed.
const delayDefault = 3 * time.Second

// maxDelay bounds --delay: the clients give up after clientTimeout.
const maxDelay = 10 * time.Second

// exitInterrupted is the exit status after Ctrl-C (128 + SIGINT).
const exitInterrupted = 130

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch role := os.Getenv(roleEnv); role {
	case "":
		err = runDemo(ctx, os.Args[1:], os.Stdout, os.Stderr)
	case roleServer:
		err = runServer(ctx, os.Args[1:], os.Stdout, os.Stderr)
	case roleClient:
		err = runClient(ctx, os.Args[1:], os.Stdout, os.Stderr)
	case roleNaive:
		err = runNaive(ctx, os.Args[1:], os.Stdout, os.Stderr)
	default:
		err = fmt.Errorf("%s=%q: unknown role", roleEnv, role)
	}
	var exit *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &exit):
		os.Exit(exit.code)
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "killresume: interrupted")
		stop()
		os.Exit(exitInterrupted)
	default:
		fmt.Fprintln(os.Stderr, "killresume:", err)
		os.Exit(1)
	}
}

// exitError ends the process with code, its message already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// options are the demo's flags.
type options struct {
	dsn     string
	delay   time.Duration
	keep    bool
	verbose bool
}

// parseFlags parses the demo's command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{delay: delayDefault}
	fs := flag.NewFlagSet("killresume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./examples/killresume [--dsn postgres://...] [--delay 3s] [--keep] [--verbose]")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.dsn, "dsn", "", "run the payments API on this PostgreSQL (postgres://...) or MySQL/MariaDB (mysql://user:pass@host:port/db) database, or with its idempotency records in this Redis (redis://host:port/n), instead of an embedded SQLite file")
	fs.DurationVar(&o.delay, "delay", o.delay, "how long the server holds each payment handler (the in-flight window the client is killed in), 1s to 10s")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (payments database, client queue) and print its path")
	fs.BoolVar(&o.verbose, "verbose", false, "also show the child processes' logs (server request log, SDK debug log)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.delay < time.Second || o.delay > maxDelay {
		return options{}, fmt.Errorf("--delay must be between 1s and %v, got %v", maxDelay, o.delay)
	}
	return o, nil
}
