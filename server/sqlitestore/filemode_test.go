package sqlitestore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/storetest"
)

// The store file holds principals, keys and responses: Open creates it, and
// with it SQLite's WAL and shared-memory files, readable by the owner
// alone, whatever the process umask allows.
func TestOpenSQLite_FilesCreatedOwnerOnly(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	store, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "*", Key: "k"}
	res, err := store.Claim(ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)})
	require.NoError(t, err)
	require.NoError(t, store.Complete(ctx, sc, res.Token, now, &server.StoredResponse{Status: 201, Body: []byte("receipt")}))

	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		require.NoError(t, err, "after a write, %s exists", filepath.Base(name))
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "mode of %s: got %v want -rw-------", filepath.Base(name), fi.Mode().Perm())
	}
}

// An existing file keeps the mode its owner gave it: Open creates files
// owner-only but does not change the mode of a file it did not create.
func TestOpenSQLite_ExistingFileModeKept(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	path := filepath.Join(t.TempDir(), "idem.db")
	require.NoError(t, os.WriteFile(path, nil, 0o640))
	require.NoError(t, os.Chmod(path, 0o640))
	db, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
}
