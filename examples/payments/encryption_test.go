package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
)

// writeKeyFile writes a fresh AES-256 key as hex, as `openssl rand -hex 32`
// does, and returns its path.
func writeKeyFile(t *testing.T) string {
	t.Helper()
	var k [32]byte
	_, _ = rand.Read(k[:])
	p := filepath.Join(t.TempDir(), "idem.key")
	require.NoError(t, os.WriteFile(p, []byte(hex.EncodeToString(k[:])+"\n"), 0o600))
	return p
}

// With --encryption-key-file the stored response is sealed: the database
// file holds no receipt in clear, a restart with the same key replays it,
// and a restart with another key refuses to replay it (503, never the
// handler again).
func TestBinary_EncryptionKeyFile(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	db := filepath.Join(t.TempDir(), "payments.db")
	key := writeKeyFile(t)
	const body = `{"amount": 4000, "currency": "USD", "description": "sealed-receipt-canary"}`

	first := startBinary(t, bin, "--addr", "127.0.0.1:0", "--db", db, "--encryption-key-file", key)
	resp, got := first.pay(t, "acct_enc", "k-sealed", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, got)
	first.stop(t)

	for _, f := range []string{db, db + "-wal"} {
		raw, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		// The ledger keeps the description; the stored response must not
		// hold the answer's bytes (the whole JSON) in clear.
		require.False(t, bytes.Contains(raw, []byte(got)), "%s holds the stored response in clear", f)
	}

	again := startBinary(t, bin, "--addr", "127.0.0.1:0", "--db", db, "--encryption-key-file", key)
	resp, replay := again.pay(t, "acct_enc", "k-sealed", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, replay)
	require.Equal(t, "true", resp.Header.Get(wire.HeaderReplayed))
	require.Equal(t, got, replay)
	again.stop(t)

	other := startBinary(t, bin, "--addr", "127.0.0.1:0", "--db", db, "--encryption-key-file", writeKeyFile(t))
	resp, refused := other.pay(t, "acct_enc", "k-sealed", body)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, refused)
	require.Contains(t, refused, "store-unavailable")
	other.stop(t)
}

// A key file that is not 64 hex digits stops the command before it serves.
func TestBinary_EncryptionKeyFileInvalid(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	bad := filepath.Join(t.TempDir(), "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("not-a-key"), 0o600))
	out, err := exec.Command(bin, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "p.db"), "--encryption-key-file", bad).CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "%s", out)
	require.Contains(t, string(out), "--encryption-key-file")
}
