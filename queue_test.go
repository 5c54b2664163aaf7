package idemkit

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestOpen_CorruptFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queue.db")
	garbage := bytes.Repeat([]byte("not a database, just bytes. "), 400)
	require.NoError(t, os.WriteFile(path, garbage, 0o600))
	_, err := Open(testkit.Ctx(t), path, nil)
	requireQueueError(t, err, (*QueueError).Corrupt)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, garbage, after, "a corrupt queue file is left untouched")

	_, err = Open(testkit.Ctx(t), t.TempDir(), nil)
	require.ErrorContains(t, err, "is a directory")
	_, err = Open(testkit.Ctx(t), filepath.Join(t.TempDir(), "no", "such", "dir", "q.db"), nil)
	require.Error(t, err)

	// A damaged database (valid header, pages overwritten).
	b := setup(t, nil, nil)
	for i := 0; i < 50; i++ {
		_, err := b.c.Submit(testkit.Ctx(t), &Request{URL: fmt.Sprintf("http://127.0.0.1:1/%d", i), Body: bytes.Repeat([]byte("x"), 2000)})
		require.NoError(t, err)
	}
	require.NoError(t, b.c.Close())
	raw, err := os.ReadFile(b.path)
	require.NoError(t, err)
	if len(raw) < 8192 {
		// Everything may still be in the WAL; checkpointed by Close normally.
		t.Fatalf("queue file only %d bytes", len(raw))
	}
	for i := 4096; i < len(raw); i++ {
		raw[i] = 0xA5
	}
	require.NoError(t, os.WriteFile(b.path, raw, 0o600))
	c, err := Open(testkit.Ctx(t), b.path, nil)
	if err == nil {
		_, err = c.List(testkit.Ctx(t), nil)
		require.NoError(t, c.Close())
	}
	requireQueueError(t, err, (*QueueError).Corrupt)
}

func TestClient_LockedQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	kept, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/kept"})
	require.NoError(t, err)

	// Another "process" holds the write lock.
	locker := rawDB(t, b.path)
	conn, err := locker.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)

	db, err := sql.Open("sqlite", b.path+"?_pragma=busy_timeout(100)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	require.NoError(t, err)
	defer db.Close()
	_, err = NewClient(ctx, db, nil)
	requireQueueError(t, err, (*QueueError).Locked, "migrating needs the write lock")

	// A Client opened before the lock: Submit fails clearly, reads work.
	short, err := sql.Open("sqlite", b.path+"?_pragma=busy_timeout(100)")
	require.NoError(t, err)
	defer short.Close()
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	c2, err := NewClient(ctx, short, testConfig())
	require.NoError(t, err)
	defer c2.Close()
	_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	_, err = c2.Submit(ctx, &Request{URL: "http://127.0.0.1:1/new"})
	requireQueueError(t, err, (*QueueError).Locked)
	got, err := c2.Get(ctx, kept.ID)
	require.NoError(t, err, "reads go on in WAL mode")
	require.Equal(t, kept.Key, got.Key)

	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	_, err = c2.Submit(ctx, &Request{URL: "http://127.0.0.1:1/new"})
	require.NoError(t, err)
	all, err := c2.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all, 2, "nothing already queued was lost")
}

func TestClient_CorruptRowIsQuarantined(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	bad, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/bad"})
	require.NoError(t, err)
	_, err = rawDB(t, b.path).Exec(`UPDATE idemkit_intents SET header = X'7B7B' WHERE id = ?`, bad.ID)
	require.NoError(t, err)
	_, err = b.c.q.Claim(ctx, "", time.Now(), time.Minute, nil)
	requireQueueError(t, err, (*QueueError).Corrupt)
	_, err = b.c.Get(ctx, bad.ID)
	requireQueueError(t, err, (*QueueError).Corrupt)
	cl, err := b.c.q.Claim(ctx, "", time.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.Nil(t, cl, "the bad row is set aside, not retried in a loop")
}

// TestClient_WaitsOutABriefLock: Open's Client retries the write lock held
// by another process for up to its busy timeout.
func TestClient_WaitsOutABriefLock(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	conn, err := rawDB(t, b.path).Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/x"})
		done <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool { return b.c.q.Waiting.Load() == 1 }, "Submit waiting")
	select {
	case err := <-done:
		t.Fatalf("Submit returned %v while the lock was held", err)
	default:
	}
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, <-done)
}

func TestClient_ReadOnlyQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	kept, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/x"})
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:"+b.path+"?mode=ro&_pragma=busy_timeout(1000)")
	require.NoError(t, err)
	defer db.Close()
	ro, err := NewClient(ctx, db, nil)
	if err == nil {
		_, err = ro.Submit(ctx, &Request{URL: "http://127.0.0.1:1/y"})
		require.NoError(t, ro.Close())
	}
	requireQueueError(t, err, (*QueueError).ReadOnly)
	all, err := b.c.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, kept.ID, all[0].ID)
}

// TestList_DamagedRowDoesNotHideTheOthers: one row that cannot be decoded does not
// hide the others; List returns them with a Corrupt QueueError naming it.
func TestList_DamagedRowDoesNotHideTheOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	good1, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/a"})
	require.NoError(t, err)
	bad, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/bad"})
	require.NoError(t, err)
	good2, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/b"})
	require.NoError(t, err)
	_, err = rawDB(t, b.path).Exec(`UPDATE idemkit_intents SET header = X'7B7B' WHERE id = ?`, bad.ID)
	require.NoError(t, err)

	list, err := b.c.List(ctx, nil)
	requireQueueError(t, err, (*QueueError).Corrupt)
	require.Contains(t, err.Error(), bad.ID)
	var ids []string
	for _, in := range list {
		ids = append(ids, in.ID)
	}
	require.ElementsMatch(t, []string{good1.ID, good2.ID}, ids, "the good rows are still listed")
}
