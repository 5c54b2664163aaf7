package main

import (
	"context"
	"crypto/rand"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/internal/wire"
)

// With --dsn redis://… the records live in Redis (lease mode) and the
// ledger in the SQLite file --db: a payment made by one process is
// replayed by the next.
func TestBinary_Redis(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Redis)
	bin := buildBinary(t)
	args := []string{"--dsn", dsn, "--db", filepath.Join(t.TempDir(), "ledger.db"), "--addr", "127.0.0.1:0", "--window", "1h"}
	key := "redis-" + rand.Text() // the shared Redis outlives this test

	first := startBinary(t, bin, args...)
	resp, body := first.pay(t, "alice", key, usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
	first.stop(t)
	require.Contains(t, first.stderr.String(), "outcome=executed")
	require.Contains(t, first.stderr.String(), "backend=redis")
	require.Contains(t, first.stderr.String(), "mode=lease")

	second := startBinary(t, bin, args...)
	again, againBody := second.pay(t, "alice", key, usd40)
	require.Equal(t, http.StatusCreated, again.StatusCode)
	require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
	require.Equal(t, body, againBody, "the restarted server replays the stored response")
	second.stop(t)
}

// On a Redis that evicts keys under memory pressure the command refuses to
// start, naming the setting.
func TestBinary_RedisEvictingRefusesToStart(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t, "maxmemory", "64mb", "maxmemory-policy", "allkeys-lru")
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--dsn", srv.URL(), "--db", filepath.Join(t.TempDir(), "ledger.db"), "--addr", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "output: %s", out)
	require.NotZero(t, exitErr.ExitCode())
	require.Contains(t, string(out), "maxmemory-policy")
	require.Contains(t, string(out), "allkeys-lru")
	require.NotContains(t, string(out), "listening on")
}

func TestParseFlags_RedisDefaultsToLease(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--dsn", "redis://127.0.0.1:6379/0"}, nil)
	require.NoError(t, err)
	require.Equal(t, "lease", string(o.cfg.Mode))

	// An explicit transactional mode is refused when the API opens.
	o, err = parseFlags([]string{"--dsn", "redis://127.0.0.1:6379/0", "--mode", "transactional"}, nil)
	require.NoError(t, err)
	var stdout, stderr syncBuffer
	err = run(t.Context(), []string{"--dsn", "redis://127.0.0.1:1/0", "--mode", "transactional", "--addr", "127.0.0.1:0"}, &stdout, &stderr)
	require.ErrorContains(t, err, "lease")
	require.Equal(t, "transactional", string(o.cfg.Mode))
}
