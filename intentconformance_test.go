package idemkit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/intenttest"
)

// The SQLite client passes the intent conformance suite (internal/intenttest),
// as the River backend (package idemriver) does.
func TestIntentConformance(t *testing.T) {
	t.Parallel()
	intenttest.Run(t, sqliteBackend)
}

// TestIntentConformanceChild is the worker process of the suite's takeover
// case; in a normal run it does nothing.
func TestIntentConformanceChild(t *testing.T) {
	intenttest.Child(t, sqliteBackend)
}

var sqliteBackend = intenttest.Backend{
	Name: "sqlite",
	Open: func(t *testing.T, o intenttest.Options) intenttest.Queue {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		q, err := openSQLiteQueue(ctx, filepath.Join(t.TempDir(), "queue.db"), o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Close() })
		return q
	},
	Reopen: func(ctx context.Context, loc string, o intenttest.Options) (intenttest.Queue, error) {
		return openSQLiteQueue(ctx, loc, o)
	},
	ChildTest: "TestIntentConformanceChild",
}

type sqliteQueue struct {
	c    *idemkit.Client
	path string
}

func openSQLiteQueue(ctx context.Context, path string, o intenttest.Options) (*sqliteQueue, error) {
	backoff := o.Backoff
	cfg := &idemkit.Config{
		Window:             o.Window,
		SafetyMargin:       o.SafetyMargin,
		MaxAttemptsPerHour: o.MaxAttemptsPerHour,
		AttemptTimeout:     o.AttemptTimeout,
		LeaseDuration:      o.LeaseDuration,
		Backoff: func(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
			return backoff
		},
		SendHookFunc: func(_ string, r *http.Request) error {
			if o.Credential != "" {
				r.Header.Set("Authorization", "Bearer "+o.Credential)
			}
			return nil
		},
		Logger: slog.New(slog.DiscardHandler),
	}
	c, err := idemkit.Open(ctx, path, cfg)
	if err != nil {
		return nil, err
	}
	return &sqliteQueue{c: c, path: path}, nil
}

func (q *sqliteQueue) Submit(ctx context.Context, r *intenttest.Request) (*intenttest.Intent, error) {
	in, err := q.c.Submit(ctx, &idemkit.Request{Method: r.Method, URL: r.URL, Header: r.Header, Body: r.Body})
	if err != nil {
		return nil, err
	}
	return sqliteIntent(in), nil
}

func (q *sqliteQueue) Work(ctx context.Context) error { return q.c.Run(ctx) }

func (q *sqliteQueue) Get(ctx context.Context, id string) (*intenttest.Intent, error) {
	in, err := q.c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return sqliteIntent(in), nil
}

func (q *sqliteQueue) Wait(ctx context.Context, id string) (*intenttest.Intent, error) {
	in, err := q.c.Wait(ctx, id)
	if in == nil {
		return nil, err
	}
	return sqliteIntent(in), nil // the intent's state is its error
}

// Stored returns the queue file with its write-ahead log.
func (q *sqliteQueue) Stored(context.Context) ([]byte, error) {
	var all bytes.Buffer
	for _, p := range []string{q.path, q.path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		all.Write(b)
	}
	return all.Bytes(), nil
}

func (q *sqliteQueue) Location() string { return q.path }
func (q *sqliteQueue) Close() error     { return q.c.Close() }

func sqliteIntent(in *idemkit.Intent) *intenttest.Intent {
	out := &intenttest.Intent{
		ID: in.ID, Key: in.Key, State: intenttest.State(in.State),
		Attempts: in.Attempts, FirstAttemptAt: in.FirstAttemptAt, Horizon: in.Horizon, LastError: in.LastError,
	}
	if o := in.Outcome; o != nil {
		out.Status, out.Replayed, out.Header, out.Body = o.Status, o.Replayed, o.Header, o.Body
	}
	return out
}
