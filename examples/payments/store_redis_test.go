package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/testkit"
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
	var stdout, stderr testkit.SyncBuffer
	err = run(t.Context(), []string{"--dsn", "redis://127.0.0.1:1/0", "--mode", "transactional", "--addr", "127.0.0.1:0"}, &stdout, &stderr)
	require.ErrorContains(t, err, "lease")
	require.Equal(t, "transactional", string(o.cfg.Mode))
}

// A Redis restarted without persistence while a payment is in flight
// forgets its claim: the client's retry runs the handler again. The ledger's
// unique (account, Idempotency-Key) is the downstream key of the lease-mode
// pattern, and keeps the payment single: both attempts answer with the
// same payment.
func TestBinary_RedisRestartMidPaymentChargesOnce(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	bin := buildBinary(t)
	p := startBinary(t, bin, "--dsn", srv.URL(), "--db", filepath.Join(t.TempDir(), "ledger.db"),
		"--addr", "127.0.0.1:0", "--delay", "3s")

	type answer struct {
		status int
		body   string
		err    error
	}
	first := make(chan answer, 1)
	go func() { // p.pay's require must not run off the test's goroutine
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/v1/payments", strings.NewReader(usd40))
		if err != nil {
			first <- answer{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "restart-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		first <- answer{resp.StatusCode, string(b), err}
	}()
	rc := srv.Client(t)
	require.Eventually(t, func() bool {
		n, err := rc.DBSize(t.Context()).Result()
		return err == nil && n == 1
	}, 30*time.Second, 10*time.Millisecond, "the first attempt's claim never appeared")
	srv.Restart(t)

	resp, body := p.pay(t, "alice", "restart-1", usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
	require.Empty(t, resp.Header.Get(wire.HeaderReplayed), "the claim was lost: the retry ran the handler again")
	a := <-first
	require.NoError(t, a.err)
	require.Equal(t, http.StatusCreated, a.status, "body: %s", a.body)
	require.JSONEq(t, a.body, body, "both attempts answer with the one payment")

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.url+"/v1/payments", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer alice")
	listResp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer listResp.Body.Close()
	var list struct {
		Payments []paymentsapi.Payment `json:"payments"`
	}
	require.NoError(t, json.NewDecoder(listResp.Body).Decode(&list))
	require.Len(t, list.Payments, 1, "one charge")
	p.stop(t)
}
