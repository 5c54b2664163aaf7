// Command payments serves a small payments API built on idemkit's server
// package (see internal/paymentsapi): POST /v1/payments is protected by an
// Idempotency-Key, and the payment row and the idempotency record commit in
// one transaction.
//
//	go run ./examples/payments [--addr 127.0.0.1:8080] [--dsn postgres://...|mysql://...] [--db FILE] [--window 24h] [--delay 0s] [--delay-after 0s] [--metrics] [--encryption-key-file FILE] [--mode lease --recover]
//
// Without --dsn it keeps everything in the SQLite file --db and needs nothing
// installed; with --dsn it uses PostgreSQL (postgres://...) or MySQL/MariaDB
// (mysql://user:pass@host:port/db). Once it accepts connections it
// prints one line on stdout, "listening on http://HOST:PORT", which other
// tools parse (use --addr 127.0.0.1:0 for a free port). Logs go to stderr.
// With --metrics it serves Prometheus metrics on GET /metrics: the
// middleware's counters and the store's health (server/prommetrics).
// SIGINT or SIGTERM shut it down gracefully. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/server/sealstore"
)

// shutdownTimeout bounds the graceful shutdown.
const shutdownTimeout = 10 * time.Second

// addrDefault is the default of --addr.
const addrDefault = "127.0.0.1:8080"

// The HTTP server's limits, as a server exposed to clients should set them:
// a client that sends its headers or its body slowly, or holds an idle
// connection, is cut off instead of holding a connection (and its
// goroutine and buffers) for as long as it likes.
const (
	// readTimeoutDefault is the default of --read-timeout: the most a
	// client may take to send a whole request, headers and body.
	readTimeoutDefault = 10 * time.Second
	// readHeaderTimeoutMax bounds the time to send the headers (at most
	// the read timeout).
	readHeaderTimeoutMax = 5 * time.Second
	// idleTimeout closes a keep-alive connection idle this long.
	idleTimeout = 60 * time.Second
	// maxHeaderBytes bounds the request headers.
	maxHeaderBytes = 32 << 10
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

// options are the command line: the listen address and the API's Config.
type options struct {
	addr string
	// sweep is --sweep: 0 runs no sweeper.
	sweep time.Duration
	// readTimeout is --read-timeout.
	readTimeout time.Duration
	mode        string
	// keyFile is --encryption-key-file.
	keyFile string
	// metrics is --metrics: serve GET /metrics.
	metrics bool
	cfg     paymentsapi.Config
}

func defaultOptions() options {
	return options{
		addr:        addrDefault,
		sweep:       paymentsapi.SweepIntervalDefault,
		readTimeout: readTimeoutDefault,
		mode:        string(paymentsapi.ModeDefault),
		cfg:         paymentsapi.Config{DB: paymentsapi.DBDefault, Window: paymentsapi.WindowDefault},
	}
}

// parseFlags parses the command line into options.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := defaultOptions()
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", o.addr, "listen address; 127.0.0.1:0 picks a free port")
	fs.StringVar(&o.cfg.DSN, "dsn", o.cfg.DSN, "PostgreSQL DSN (postgres://...), MySQL/MariaDB DSN (mysql://user:pass@host:port/db), or Redis (redis://host:port/n: lease mode, ledger in --db); without it the SQLite file --db is used")
	fs.StringVar(&o.cfg.DB, "db", o.cfg.DB, "SQLite database file, created if missing (ignored with --dsn)")
	fs.DurationVar(&o.cfg.Window, "window", o.cfg.Window, "idempotency window: how long a key is remembered and replayed")
	fs.DurationVar(&o.cfg.Delay, "delay", o.cfg.Delay, "hold each payment handler this long before the payment is made")
	fs.DurationVar(&o.cfg.DelayAfter, "delay-after", o.cfg.DelayAfter, "hold each payment handler this long after the payment is made, before it answers")
	fs.StringVar(&o.mode, "mode", o.mode, `"transactional" (payment, claim and response in one transaction) or "lease" (claim committed first, payment deduplicated by key)`)
	fs.DurationVar(&o.cfg.LeaseDuration, "lease", o.cfg.LeaseDuration, "lease mode: how long a claim holds before a retry may take it over (0: 30s, capped at half the window)")
	fs.DurationVar(&o.sweep, "sweep", o.sweep, "interval of the sweeper that deletes expired idempotency records (0: no sweeper)")
	fs.DurationVar(&o.readTimeout, "read-timeout", o.readTimeout, "the most a client may take to send a whole request (headers and body); a slower one is disconnected")
	fs.BoolVar(&o.cfg.AbortOnDisconnect, "abort-on-disconnect", o.cfg.AbortOnDisconnect, "give up (and roll back) a payment when its client disconnects; by default it is finished anyway")
	fs.BoolVar(&o.cfg.LogIdentifiers, "log-identifiers", o.cfg.LogIdentifiers, "log idempotency keys and accounts as they are (by default they are hashed)")
	fs.StringVar(&o.keyFile, "encryption-key-file", "", "seal stored responses at rest with the AES-256 key in FILE (64 hex digits, e.g. from: openssl rand -hex 32)")
	fs.BoolVar(&o.metrics, "metrics", o.metrics, "serve Prometheus metrics on GET /metrics (the middleware's counters, the store's health)")
	fs.DurationVar(&o.cfg.WaitInFlight, "wait", o.cfg.WaitInFlight, "hold a retry of a payment still in flight up to this long for the original's answer instead of 409 (0: 409 at once)")
	fs.Func("revoked-accounts", "comma-separated accounts whose stored payments are no longer replayed: their retries get 403 replay-forbidden", func(v string) error {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.cfg.RevokedAccounts = append(o.cfg.RevokedAccounts, a)
			}
		}
		return nil
	})
	fs.BoolVar(&o.cfg.Recover, "recover", o.cfg.Recover, "lease mode: run a recoverer that completes (from the ledger) or releases the payments whose process died before storing the response")
	fs.DurationVar(&o.cfg.RecoverInterval, "recover-interval", o.cfg.RecoverInterval, "interval between two passes of the --recover recoverer (0: 30s)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if o.keyFile != "" {
		key, err := sealstore.ReadKeyFile(o.keyFile)
		if err != nil {
			return options{}, fmt.Errorf("--encryption-key-file: %w", err)
		}
		o.cfg.EncryptionKey = key
	}
	if err := o.validate(); err != nil {
		return options{}, err
	}
	if !flagGiven(fs, "mode") {
		o.mode = string(paymentsapi.DefaultMode(o.cfg.DSN)) // lease with Redis
	}
	o.cfg.Mode = paymentsapi.Mode(o.mode)
	o.cfg.SweepInterval = o.sweep
	if o.sweep == 0 {
		o.cfg.SweepInterval = -1
	}
	return o, nil
}

// validate returns an error naming the flag that is wrong.
func (o options) validate() error {
	var errs []error
	if o.addr == "" {
		errs = append(errs, errors.New("--addr must not be empty"))
	}
	if o.cfg.DSN == "" && o.cfg.DB == "" {
		errs = append(errs, errors.New("--db must not be empty without --dsn"))
	}
	if o.cfg.Window < time.Second {
		errs = append(errs, fmt.Errorf("--window must be at least 1s, got %v", o.cfg.Window))
	}
	if o.cfg.Delay < 0 {
		errs = append(errs, fmt.Errorf("--delay must not be negative, got %v", o.cfg.Delay))
	}
	if o.cfg.DelayAfter < 0 {
		errs = append(errs, fmt.Errorf("--delay-after must not be negative, got %v", o.cfg.DelayAfter))
	}
	if m := paymentsapi.Mode(o.mode); m != paymentsapi.ModeTransactional && m != paymentsapi.ModeLease {
		errs = append(errs, fmt.Errorf("--mode must be %q or %q, got %q", paymentsapi.ModeTransactional, paymentsapi.ModeLease, o.mode))
	}
	if l := o.cfg.LeaseDuration; l < 0 || (l > 0 && l >= o.cfg.Window) {
		errs = append(errs, fmt.Errorf("--lease must be positive and shorter than --window (%v), got %v", o.cfg.Window, l))
	}
	if o.readTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--read-timeout must be positive, got %v", o.readTimeout))
	}
	if o.cfg.RecoverInterval < 0 {
		errs = append(errs, fmt.Errorf("--recover-interval must not be negative, got %v", o.cfg.RecoverInterval))
	}
	if o.sweep < 0 {
		errs = append(errs, fmt.Errorf("--sweep must not be negative, got %v", o.sweep))
	}
	if o.cfg.WaitInFlight < 0 {
		errs = append(errs, fmt.Errorf("--wait must not be negative, got %v", o.cfg.WaitInFlight))
	}
	return errors.Join(errs...)
}

// run serves the API until ctx is canceled, then shuts down gracefully:
// handlers still in their --delay give up with 503 (nothing is committed),
// the others finish, and the database is closed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	o.cfg.Logger = logger
	var reg *prometheus.Registry
	if o.metrics {
		reg = prometheus.NewRegistry()
		o.cfg.Metrics = reg
	}

	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	app, err := paymentsapi.Open(openCtx, &o.cfg)
	cancel()
	if err != nil {
		return err
	}
	defer app.Close()

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	handler := app.Handler()
	if reg != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/", handler)
		handler = mux
	}
	srv := newHTTPServer(handler, o.readTimeout, logger)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	cfg := app.Config()
	logger.Info("payments API started", "addr", ln.Addr().String(), "backend", app.Backend(), "mode", cfg.Mode,
		"window", cfg.Window, "delay", cfg.Delay)
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	app.StopHandlers()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	<-serveErr // http.ErrServerClosed
	return nil
}

// newHTTPServer is the HTTP server of the API, with the limits every server
// exposed to clients needs: read-header, read and idle timeouts and a
// header size limit (the body limit is the route's: see
// paymentsapi.MaxBodyBytes). There is no write timeout: a payment held by
// --delay, or one waiting on its database, must be able to answer.
func newHTTPServer(h http.Handler, readTimeout time.Duration, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(readHeaderTimeoutMax, readTimeout),
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
