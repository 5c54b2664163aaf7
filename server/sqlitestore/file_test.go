package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// Replacing (or restoring) the SQLite file under a running store: the old
// connections would keep writing the unlinked file and a retry would see no
// record, so the store detects the new file and fails closed.
func TestSQLiteStore_ReplacedFileFailsClosed(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "*", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)}
	res, err := b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)

	// A restored backup: another, empty database renamed over the file.
	restored := filepath.Join(t.TempDir(), "restored.db")
	db2, err := sqlitestore.Open(b.ctx, restored)
	require.NoError(t, err)
	st2, err := sqlitestore.New(db2, nil)
	require.NoError(t, err)
	require.NoError(t, st2.Migrate(b.ctx))
	require.NoError(t, db2.Close())
	require.NoError(t, os.Rename(restored, b.path))

	_, err = b.store.Claim(b.ctx, req)
	require.ErrorIs(t, err, sqlitestore.ErrFileReplaced)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	_, err = b.store.Get(b.ctx, sc, now)
	require.ErrorIs(t, err, sqlitestore.ErrFileReplaced)
	require.ErrorIs(t, b.store.Complete(b.ctx, sc, res.Token, now, &server.StoredResponse{Status: 201}), sqlitestore.ErrFileReplaced)
	_, err = b.store.BeginTx(b.ctx, 0)
	require.ErrorIs(t, err, sqlitestore.ErrFileReplaced)

	require.NoError(t, os.Remove(b.path))
	_, err = b.store.Get(b.ctx, sc, now)
	require.ErrorIs(t, err, sqlitestore.ErrFileReplaced, "a deleted file fails closed too")
}

// A claim that waits for SQLite's single writer gets its whole lease from
// the moment it holds the lock: a short lease does not lapse in the queue.
func TestSQLiteStore_LeaseStartsWhenClaimAcquired(t *testing.T) {
	t.Parallel()
	b := setupSQLite(t)
	release := holdWriteLock(t, b)
	const wait = 300 * time.Millisecond
	timer := time.AfterFunc(wait, release)
	t.Cleanup(func() { timer.Stop() })

	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "*", Key: "queued"}
	lease := 50 * time.Millisecond
	res, err := b.store.Claim(context.Background(), server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(lease)})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	rec, err := b.store.Get(b.ctx, sc, now)
	require.NoError(t, err)
	require.GreaterOrEqual(t, rec.LockedUntil.Sub(now), wait+lease-5*time.Millisecond,
		"the lease starts when the write lock is held, not when the claim started waiting")
}
