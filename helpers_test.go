package idemkit

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is an injected clock for horizon tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func (f *fakeClock) Set(t time.Time) {
	f.mu.Lock()
	f.t = t
	f.mu.Unlock()
}

// fastBackoff keeps retry tests quick.
func fastBackoff(time.Duration, time.Duration, int, *http.Response) time.Duration {
	return time.Millisecond
}

type testBundle struct {
	c    *Client
	path string
	srv  *httptest.Server
	cfg  *Config
}

// testConfig is a Config for tests: fast backoff and polling.
func testConfig() *Config {
	return &Config{Backoff: fastBackoff, pollInterval: 10 * time.Millisecond}
}

// setup opens a fresh queue in t.TempDir() and, if h is not nil, an
// httptest server for it. cfg may be nil (testConfig()).
func setup(t *testing.T, cfg *Config, h http.Handler) *testBundle {
	t.Helper()
	if cfg == nil {
		cfg = testConfig()
	}
	b := &testBundle{path: filepath.Join(t.TempDir(), "queue.db"), cfg: cfg}
	if h != nil {
		b.srv = httptest.NewServer(h)
		t.Cleanup(b.srv.Close)
	}
	c, err := Open(context.Background(), b.path, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	b.c = c
	return b
}

// reopen opens a second Client on the same queue file.
func (b *testBundle) reopen(t *testing.T, cfg *Config) *Client {
	t.Helper()
	c, err := Open(context.Background(), b.path, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// rawDB opens the queue file on a connection of the test's own.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// requireQueueError asserts that err is, or wraps, a *QueueError for which
// is (a method such as (*QueueError).Locked) reports true.
func requireQueueError(t *testing.T, err error, is func(*QueueError) bool, msgAndArgs ...any) {
	t.Helper()
	var qe *QueueError
	require.ErrorAs(t, err, &qe, msgAndArgs...)
	require.True(t, is(qe), "%v: not the expected QueueError problem %v", err, msgAndArgs)
}
