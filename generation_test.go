package idemkit

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
}

// TestGeneration_RestoredInPlaceHoldsUnsentIntents: a backup of the queue
// is taken while an intent is queued and not yet sent; the intent is sent;
// the backup is restored at the same path. The restored queue does not
// send the intent again (after the server's window that would run the
// handler twice): it is held for Adopt, like a copied queue's.
func TestGeneration_RestoredInPlaceHoldsUnsentIntents(t *testing.T) {
	t.Parallel()
	var effects atomic.Int32
	cfg := testConfig()
	cfg.Logger = discardLogger()
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		effects.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	in, err := b.c.Submit(testkit.Ctx(t), &Request{URL: b.srv.URL + "/pay"})
	require.NoError(t, err)
	backup := b.path + ".bak"
	db := rawDB(t, b.path)
	_, err = db.Exec(`VACUUM INTO ?`, backup)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	c2 := b.reopen(t, cfg)
	counts, err := c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, counts[StateSucceeded])
	require.NoError(t, c2.Close())
	require.NoError(t, b.c.Close())

	// Restored in place: the backup over the queue file.
	for _, suffix := range []string{"-wal", "-shm"} {
		_ = os.Remove(b.path + suffix)
	}
	copyFile(t, backup, b.path)
	c3 := b.reopen(t, cfg)
	counts, err = c3.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, counts[StatePending], "held, not sent: %v", counts)
	require.EqualValues(t, 1, effects.Load(), "not sent again")
	_, err = c3.Wait(testkit.Ctx(t), in.ID)
	requireQueueError(t, err, (*QueueError).Foreign)
	require.Contains(t, err.Error(), "restored from a backup")

	// Adopted on purpose (checked with the API first): sent.
	n, err := c3.Adopt(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	counts, err = c3.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, counts[StateSucceeded])
	require.EqualValues(t, 2, effects.Load())
}

// TestGeneration_ReopenedQueueIsNotRestored: a queue reopened as it was
// left holds nothing.
func TestGeneration_ReopenedQueueIsNotRestored(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Logger = discardLogger()
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for range 3 {
		_, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL + "/pay"})
		require.NoError(t, err)
	}
	in, err := b.c.Submit(testkit.Ctx(t), &Request{URL: b.srv.URL + "/later"})
	require.NoError(t, err)
	require.Equal(t, int64(3), readGenerationFile(t, b.path+"-generation"))
	c2 := b.reopen(t, cfg)
	got, err := c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 4, got[StateSucceeded], "%v", got)
	_, err = c2.Wait(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
}

// readGenerationFile reads the -generation file next to a queue.
func readGenerationFile(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	g, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	return g
}
