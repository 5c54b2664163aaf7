package idemkit

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// copyQueue copies a closed queue file (and any -wal) to dst.
func copyQueue(t *testing.T, src, dst string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(src + suffix)
		if os.IsNotExist(err) && suffix != "" {
			continue
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst+suffix, b, 0o600))
	}
}

// runFor runs c's worker until ctx ends, and waits for it to stop.
func runFor(t *testing.T, c *Client, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	require.NoError(t, c.Run(ctx))
}

// TestInstance_CopiedQueueDoesNotResendForeignIntents: a queue file copied
// to another path does not send the intents queued at the original (they
// may have been sent, and their window may be over: a second payment); it
// says so with a *ForeignIntentError; it sends its own new intents; and it
// sends the old ones once adopted.
func TestInstance_CopiedQueueDoesNotResendForeignIntents(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	b := setup(t, nil, nil)
	old, err := b.c.Submit(testkit.Ctx(t), &Request{URL: srv.URL + "/charges", Body: []byte(`{"amount":1}`)})
	require.NoError(t, err)
	require.NoError(t, b.c.Close())

	copied := filepath.Join(t.TempDir(), "copy.db")
	copyQueue(t, b.path, copied)
	c, err := Open(context.Background(), copied, testConfig())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	runFor(t, c, 300*time.Millisecond)
	require.Zero(t, hits.Load(), "nothing sent from the copy")
	_, err = c.Wait(testkit.Ctx(t), old.ID)
	var fe *QueueError
	require.ErrorAs(t, err, &fe)
	require.True(t, fe.Foreign())
	require.Equal(t, old.ID, fe.IntentID)
	require.Contains(t, fe.Origin, b.path)
	require.Contains(t, fe.Here, "copy.db")
	in, err := c.Do(testkit.Ctx(t), &Request{URL: srv.URL + "/charges", Body: []byte(`{"amount":1}`), Key: old.Key})
	require.ErrorAs(t, err, &fe, "Do with the same key does not send it either")
	require.Equal(t, old.ID, in.ID, "and returns the queued intent")
	require.Zero(t, hits.Load())

	mine, err := c.Do(testkit.Ctx(t), &Request{URL: srv.URL + "/charges", Body: []byte(`{"amount":2}`)})
	require.NoError(t, err, "an intent queued here is sent")
	require.Equal(t, StateSucceeded, mine.State)
	require.EqualValues(t, 1, hits.Load())

	n, err := c.Adopt(testkit.Ctx(t), old.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := c.Do(testkit.Ctx(t), &Request{URL: srv.URL + "/charges", Body: []byte(`{"amount":1}`), Key: old.Key})
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, got.State)
	require.EqualValues(t, 2, hits.Load())
}

// TestInstance_AnotherHostRefuses: the same file opened on another host
// (a network share, a cloned disk) does not send what it did not queue.
func TestInstance_AnotherHostRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	in, err := b.c.Submit(testkit.Ctx(t), &Request{URL: "http://127.0.0.1:1/x"})
	require.NoError(t, err)
	cfg := testConfig()
	cfg.instanceHost = "another-host"
	other := b.reopen(t, cfg)
	_, err = other.Wait(testkit.Ctx(t), in.ID)
	var fe *QueueError
	require.ErrorAs(t, err, &fe)
	require.True(t, fe.Foreign())
	n, err := other.Adopt(testkit.Ctx(t), "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = other.Adopt(testkit.Ctx(t), "")
	require.NoError(t, err)
	require.Zero(t, n, "adopted once")
}

// TestInstance_InMemoryRefused: a queue that vanishes with the process
// cannot keep the promise that a returned Submit is on disk.
func TestInstance_InMemoryRefused(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	for _, p := range []string{"file::memory:", ":memory:", "file:q.db?mode=memory"} {
		_, err := Open(ctx, p, nil)
		require.Error(t, err, p)
		require.Contains(t, err.Error(), "in memory")
	}
	for _, dsn := range []string{":memory:", "file::memory:?cache=shared", "file:x?mode=memory&cache=shared", ""} {
		db, err := sql.Open("sqlite", dsn)
		require.NoError(t, err)
		_, err = NewClient(ctx, db, nil)
		require.Error(t, err, dsn)
		require.Contains(t, err.Error(), "in memory", dsn)
		db.Close()
	}
	_, err := os.Stat("file::memory:")
	require.True(t, os.IsNotExist(err), "no file named after the URI was created")
}

// TestDo_ReturnsIntentWhenLaterWriteFails: when the queue cannot record the
// answer (the write lock held elsewhere), Do still returns the intent it
// persisted, so the caller has its id to follow up.
func TestDo_ReturnsIntentWhenLaterWriteFails(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(50)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	c, err := NewClient(testkit.Ctx(t), db, testConfig())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })

	lock, err := rawDB(t, path).Conn(testkit.Ctx(t))
	require.NoError(t, err)
	t.Cleanup(func() { lock.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := lock.ExecContext(r.Context(), "BEGIN IMMEDIATE") // hold the write lock
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	in, err := c.Do(testkit.Ctx(t), &Request{URL: srv.URL})
	requireQueueError(t, err, (*QueueError).Locked)
	require.NotNil(t, in, "the persisted intent is returned")
	require.NotEmpty(t, in.ID)
	_, err = lock.ExecContext(context.Background(), "ROLLBACK")
	require.NoError(t, err)
	got, err := c.Get(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, StatePending, got.State, "resumed later, with the same key")
	require.False(t, errors.Is(err, ErrNotFound))
}
