package sweeper

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// swSQLiteStore returns a migrated SQLite store on a fresh file.
func swSQLiteStore(t *testing.T) *sqlitestore.Store {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "sweep.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, &sqlitestore.Config{SweepChunkSize: 2})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	return store
}

// swLog is a concurrency-safe log sink.
type swLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *swLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *swLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// swEventually polls cond until it holds or the deadline passes.
func swEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestSweeper_DeletesExpiredRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := swSQLiteStore(t)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: fmt.Sprint("expired-", i)},
			Fingerprint: []byte{1}, FingerprintVersion: 1,
			Now: t0, ExpiresAt: t0.Add(time.Minute), LockedUntil: t0.Add(time.Second),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
	}
	live := server.Scope{Principal: "p", Endpoint: "e", Key: "live"}
	_, err := store.Claim(ctx, server.ClaimRequest{Scope: live, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: t0, ExpiresAt: t0.Add(time.Hour), LockedUntil: t0.Add(time.Second)})
	require.NoError(t, err)
	// Expired 30 s before the sweep: inside the grace, so it stays.
	justExpired := server.Scope{Principal: "p", Endpoint: "e", Key: "just-expired"}
	_, err = store.Claim(ctx, server.ClaimRequest{Scope: justExpired, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: t0, ExpiresAt: t0.Add(90 * time.Second), LockedUntil: t0.Add(time.Second)})
	require.NoError(t, err)

	// The injected clock is two minutes after the claims.
	now := t0.Add(2 * time.Minute)
	sw := start(store, &Config{Interval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
		func() time.Time { return now })
	t.Cleanup(func() { _ = sw.Close() })

	swEventually(t, "the sweeper to delete the expired rows", func() bool {
		st, err := store.Stats(ctx, now)
		return err == nil && st.Rows == 2
	})
	_, err = store.Get(ctx, live, now)
	require.NoError(t, err, "the live record survives")

	require.NoError(t, sw.Close())
	require.NoError(t, sw.Close(), "Close twice")
	select {
	case <-sw.done: // closed by the goroutine as it exits
	default:
		t.Fatal("Close returned while the sweeper goroutine was still running")
	}
	rows, err := store.Stats(ctx, now)
	require.NoError(t, err)
	require.Equal(t, int64(2), rows.Rows, "the live record and the one inside the grace")
}

func TestSweeper_LogsFailures(t *testing.T) {
	t.Parallel()
	store := swSQLiteStore(t)
	require.NoError(t, store.DB().Close()) // every Sweep now fails

	var log swLog
	sw := Start(store, &Config{Interval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	t.Cleanup(func() { _ = sw.Close() })
	swEventually(t, "a logged sweep failure", func() bool { return strings.Contains(log.String(), "sweep of expired idempotency records failed") })
	require.Contains(t, log.String(), "database is closed")
	require.NoError(t, sw.Close())
}

func TestSweeperConfig_WithDefaults(t *testing.T) {
	t.Parallel()
	cfg := (*Config)(nil).WithDefaults()
	require.Equal(t, intervalDefault, cfg.Interval)
	require.Same(t, slog.Default(), cfg.Logger)

	custom := &Config{Interval: time.Second}
	got := custom.WithDefaults()
	require.Equal(t, time.Second, got.Interval)
	require.Nil(t, custom.Logger, "WithDefaults returns a copy")
}
