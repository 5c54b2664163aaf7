package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testbin"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
)

// buildBinary builds this command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, ".", t.TempDir(), "payments")
}

type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *testkit.SyncBuffer
	done   chan error
}

// startBinary runs bin with args and waits for its listening line.
func startBinary(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stderr: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})

	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	select {
	case line, ok := <-lines:
		require.True(t, ok, "the server exited before listening; stderr:\n%s", p.stderr.String())
		rest, found := strings.CutPrefix(line, "listening on ")
		require.True(t, found, "got first stdout line %q want listening on http://...", line)
		require.True(t, strings.HasPrefix(rest, "http://127.0.0.1:"), "got %q", rest)
		require.NotEqual(t, "http://127.0.0.1:0", rest, "the line must name the port actually bound")
		p.url = rest
	case <-timeout.C:
		t.Fatalf("no listening line within 60s; stderr:\n%s", p.stderr.String())
	}
	return p
}

// stop sends SIGTERM and requires a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		require.NoError(t, err, "exit after SIGTERM; stderr:\n%s", p.stderr.String())
	case <-timeout.C:
		t.Fatalf("no exit within 30s of SIGTERM; stderr:\n%s", p.stderr.String())
	}
	require.Contains(t, p.stderr.String(), "shutting down")
}

func (p *proc) pay(t *testing.T, account, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, p.url+"/v1/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+account)
	req.Header.Set("Idempotency-Key", key)
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// TestBinary runs the real command twice on the same database: a payment
// made by the first process is replayed by the second.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"sqlite", func(t *testing.T) []string { return []string{"--db", filepath.Join(t.TempDir(), "payments.db")} }},
		{"postgres", func(t *testing.T) []string { return []string{"--dsn", testpg.SchemaDSN(t)} }},
		{"mysql", func(t *testing.T) []string { return []string{"--dsn", testmysql.URL(t)} }},
		{"mysql/lease", func(t *testing.T) []string { return []string{"--dsn", testmysql.URL(t), "--mode", "lease"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append(tc.args(t), "--addr", "127.0.0.1:0", "--window", "1h")

			first := startBinary(t, bin, args...)
			resp, body := first.pay(t, "alice", "key-1", usd40)
			require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
			require.Equal(t, "3600", resp.Header.Get(wire.HeaderWindow))
			first.stop(t)
			require.Contains(t, first.stderr.String(), "outcome=executed")

			second := startBinary(t, bin, args...)
			again, againBody := second.pay(t, "alice", "key-1", usd40)
			require.Equal(t, http.StatusCreated, again.StatusCode)
			require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
			require.Equal(t, body, againBody, "the restarted server replays the stored response")
			second.stop(t)
		})
	}
}

func TestRun_Errors(t *testing.T) {
	t.Parallel()

	notSQLite := filepath.Join(t.TempDir(), "garbage.db")
	require.NoError(t, os.WriteFile(notSQLite, []byte(strings.Repeat("this is not a database\n", 100)), 0o600))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not a database", []string{"--addr", "127.0.0.1:0", "--db", notSQLite}, "garbage.db"},
		{"bad address", []string{"--addr", "127.0.0.1:99999", "--db", filepath.Join(t.TempDir(), "p.db")}, "listen"},
		{"bad flag", []string{"--window", "soon"}, "window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr testkit.SyncBuffer
			err := run(t.Context(), tc.args, &stdout, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error()+stderr.String(), tc.want)
			require.NotContains(t, stdout.String(), "listening on", "nothing may claim to listen after a failed start")
		})
	}
}

// TestRun_InProcess starts run on a free port and stops it by canceling its
// context, as SIGINT does.
func TestRun_InProcess(t *testing.T) {
	t.Parallel()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r, w := io.Pipe()
	var stderr testkit.SyncBuffer
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "p.db"), "--sweep", "10ms"}, w, &stderr)
		w.Close()
		errc <- err
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	require.True(t, ok, "got %q", line)

	p := &proc{url: url}
	resp, body := p.pay(t, "alice", "k", usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)

	cancel()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	require.NoError(t, <-errc)
	require.Contains(t, stderr.String(), "shutting down")
}

func TestParseFlags(t *testing.T) {
	t.Parallel()

	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8080", o.addr)
	require.Equal(t, paymentsapi.Config{DB: "payments.db", Window: 24 * time.Hour, Mode: paymentsapi.ModeTransactional, SweepInterval: time.Minute}, o.cfg)
	require.Equal(t, 30*time.Second, o.cfg.WithDefaults().LeaseDuration)

	o, err = parseFlags([]string{"--addr", "127.0.0.1:0", "--dsn", "postgres://x", "--window", "10s", "--delay", "2s", "--mode", "lease", "--sweep", "0", "--abort-on-disconnect"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", o.addr)
	require.Equal(t, paymentsapi.Config{DSN: "postgres://x", DB: paymentsapi.DBDefault, Window: 10 * time.Second, Delay: 2 * time.Second,
		Mode: paymentsapi.ModeLease, SweepInterval: -1, AbortOnDisconnect: true}, o.cfg, "--sweep 0 runs no sweeper")
	require.Equal(t, 5*time.Second, o.cfg.WithDefaults().LeaseDuration, "the default lease is capped at half the window")

	_, err = parseFlags([]string{"-h"}, io.Discard)
	require.True(t, errors.Is(err, flagErrHelp()), "got %v", err)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--window", "500ms"}, "--window"},
		{[]string{"--delay", "-1s"}, "--delay"},
		{[]string{"--mode", "magic"}, "--mode"},
		{[]string{"--lease", "48h"}, "--lease"},
		{[]string{"--sweep", "-1s"}, "--sweep"},
		{[]string{"--db", ""}, "--db"},
		{[]string{"--addr", ""}, "--addr"},
		{[]string{"--nope"}, "nope"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var stderr testkit.SyncBuffer
			_, err := parseFlags(tc.args, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error()+stderr.String(), tc.want, fmt.Sprintf("args %q", tc.args))
		})
	}
}
