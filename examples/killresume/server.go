package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/paymentsapi"
)

// serverLockTimeout is the server's paymentsapi.Config.LockTimeout: short,
// so that a duplicate is answered 409 well within the client's attempt
// timeout.
const serverLockTimeout = 200 * time.Millisecond

// runServer is the server role: the payments API with a handler delay on a
// free port of 127.0.0.1, reporting its address, every charge that starts and
// every POST it answers. It runs until ctx ends (SIGTERM).
func runServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("killresume server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "PostgreSQL DSN")
	db := fs.String("db", "", "SQLite file")
	delay := fs.Duration("delay", delayDefault, "handler delay")
	if err := fs.Parse(args); err != nil {
		return err
	}
	em := newEmitter(stdout)
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	openCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	app, err := paymentsapi.Open(openCtx, &paymentsapi.Config{
		DSN:           *dsn,
		DB:            *db,
		Delay:         *delay,
		SweepInterval: -1,
		// On PostgreSQL a duplicate waits this long on the in-flight
		// original's row lock before its 409 (SQLite answers at once).
		LockTimeout: serverLockTimeout,
		Logger:      logger,
		OnChargeStartFunc: func(account, key string) {
			em.emit(event{Kind: evChargeStart, Account: account, Key: key,
				Text: fmt.Sprintf("charge started for %s, Idempotency-Key %s; the handler takes %v", account, key, *delay)})
		},
	})
	cancel()
	if err != nil {
		return err
	}
	defer app.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           traceAnswers(app.Handler(), em),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	em.emit(event{Kind: evListening, URL: url,
		Text: fmt.Sprintf("payments API listening on %s (%s, transactional mode, handler delay %v)", url, app.Backend(), *delay)})

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	app.StopHandlers()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	<-serveErr
	return nil
}

// traceAnswers reports every POST the API answered.
func traceAnswers(next http.Handler, em *emitter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		ev := event{Kind: evAnswered, Key: r.Header.Get("Idempotency-Key"), Status: status,
			Replayed: rec.Header().Get("Idempotent-Replayed") == "true"}
		var p paymentsapi.Payment
		if status == http.StatusCreated && json.Unmarshal(rec.body.Bytes(), &p) == nil {
			ev.Payment, ev.Account = p.ID, p.Account
		}
		gone := ""
		if r.Context().Err() != nil {
			gone = "; its client is gone, so nobody reads this answer"
		}
		switch {
		case ev.Replayed:
			ev.Text = fmt.Sprintf("POST key %s: %d, replayed the stored response (payment %s); the handler did not run", ev.Key, status, ev.Payment)
		case status == http.StatusCreated:
			ev.Text = fmt.Sprintf("POST key %s: %d, payment %s committed%s", ev.Key, status, ev.Payment, gone)
		case status == http.StatusConflict:
			ev.Text = fmt.Sprintf("POST key %s: 409 in-flight (Retry-After: %s), a request with this key is still running", ev.Key, rec.Header().Get("Retry-After"))
		case status == http.StatusServiceUnavailable && problemSlug(problemType(rec.body.Bytes())) == "store-busy":
			ev.Text = fmt.Sprintf("POST key %s: 503 store-busy, another payment's transaction holds the database's write lock (SQLite has one writer)", ev.Key)
		default:
			ev.Text = fmt.Sprintf("POST key %s: %d %s %s", ev.Key, status, http.StatusText(status), problemSlug(problemType(rec.body.Bytes())))
		}
		em.emit(ev)
	})
}

// problemType returns the type of a problem+json body, or "".
func problemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Type
}

// statusRecorder records the status and (small) body a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() < 64<<10 {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
