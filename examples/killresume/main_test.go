package main

import (
	"github.com/idemkit/idemkit/internal/testbin"
	"github.com/idemkit/idemkit/internal/testdb"

	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/internal/testpg"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}

// buildBinary builds the demo into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, ".", t.TempDir(), "killresume")
}

// demoRun is one run of the demo binary.
type demoRun struct {
	cmd    *exec.Cmd
	tmp    string // the TMPDIR it ran with
	stdout *testkit.SyncBuffer
	stderr *testkit.SyncBuffer
	lines  chan string // stdout, line by line
	done   chan error
}

// startDemo runs the demo with args, its temporary files under a TMPDIR of
// the test's own.
func startDemo(t *testing.T, bin string, args ...string) *demoRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	r := &demoRun{tmp: t.TempDir(), stdout: &testkit.SyncBuffer{}, stderr: &testkit.SyncBuffer{},
		lines: make(chan string, 1024), done: make(chan error, 1)}
	r.cmd = exec.CommandContext(ctx, bin, args...)
	r.cmd.Env = append(os.Environ(), "TMPDIR="+r.tmp)
	r.cmd.Stderr = r.stderr
	pipe, err := r.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, r.cmd.Start())
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			_, _ = r.stdout.Write(append(sc.Bytes(), '\n'))
			select {
			case r.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		r.done <- r.cmd.Wait()
	}()
	return r
}

// wait returns the exit code.
func (r *demoRun) wait(t *testing.T) int {
	t.Helper()
	err := <-r.done
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	return 0
}

var (
	tempDirRe   = regexp.MustCompile(`(?m)^temp dir: (\S+)`)
	listeningRe = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	pidRe       = regexp.MustCompile(`\(pid (\d+)\)`)
	verdictRe   = regexp.MustCompile(`(?m)^VERDICT: idemkit charged exactly once \(1 payment\); naive client charged (\d+) times?$`)
)

// requireCleanedUp checks that the demo left nothing behind: its temp dir
// is gone (and nothing else is in its TMPDIR), the server's port no longer
// answers, and (on Linux) no process it named still exists.
func requireCleanedUp(t *testing.T, r *demoRun) {
	t.Helper()
	out := r.stdout.String()
	m := tempDirRe.FindStringSubmatch(out)
	require.NotNil(t, m, "no temp dir line in:\n%s", out)
	require.True(t, strings.HasPrefix(m[1], r.tmp), "temp dir %s outside TMPDIR %s", m[1], r.tmp)
	_, err := os.Stat(m[1])
	require.True(t, errors.Is(err, os.ErrNotExist), "temp dir %s still exists (stat: %v)", m[1], err)
	left, err := os.ReadDir(r.tmp)
	require.NoError(t, err)
	require.Empty(t, left, "files left in TMPDIR")

	if m := listeningRe.FindStringSubmatch(out); m != nil {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(m[1], "http://"), time.Second)
		if err == nil {
			conn.Close()
		}
		require.Error(t, err, "the server at %s still answers", m[1])
	}
	if runtime.GOOS == "linux" {
		for _, m := range pidRe.FindAllStringSubmatch(out, -1) {
			pid, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
			require.True(t, errors.Is(err, os.ErrNotExist), "process %d is still running", pid)
		}
	}
}

// TestDemo runs the demo on each backend and checks its verdict and story.
func TestDemo(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"sqlite", func(*testing.T) []string { return nil }},
		{"postgres", func(t *testing.T) []string { return []string{"--dsn", testpg.SchemaDSN(t)} }},
		{"mysql", func(t *testing.T) []string { return []string{"--dsn", testmysql.URL(t)} }},
		{"redis", func(t *testing.T) []string { return []string{"--dsn", testdb.DSN(t, testdb.Redis)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startDemo(t, bin, tc.args(t)...)
			code := r.wait(t)
			out := r.stdout.String()
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, r.stderr)

			m := verdictRe.FindStringSubmatch(out)
			require.NotNil(t, m, "no passing VERDICT line in:\n%s", out)
			require.Equal(t, "2", m[1], "the naive client should have charged twice:\n%s", out)
			require.Contains(t, out, "1 payment\n", "the idemkit ledger holds one payment")

			// The story, in order: persisted before sent, the kill, the
			// queue still pending, the resume with the same key, the replay.
			keyRe := regexp.MustCompile(`Submit returned: intent (\S+) is on disk \(fsynced\), pending, Idempotency-Key (\S+); nothing has been sent yet`)
			km := keyRe.FindStringSubmatch(out)
			require.NotNil(t, km, "no persisted line in:\n%s", out)
			key := km[2]
			requireInOrder(t, out,
				"Submit returned: intent",
				"-> POST /v1/payments  Idempotency-Key: "+key,
				"charge started for alice-",
				"kill -9 client",
				"no outcome",
				"resuming it with the SAME Idempotency-Key "+key,
				"the killed client (pid ",
				"its lease is taken over at once",
				"-> POST /v1/payments  Idempotency-Key: "+key,
				"<- 201 Created  Idempotent-Replayed: true",
				"VERDICT:",
			)
			killed := regexp.MustCompile(`kill -9 client \(pid (\d+)\)`).FindStringSubmatch(out)
			taken := regexp.MustCompile(`the killed client \(pid (\d+)\) is dead`).FindStringSubmatch(out)
			require.NotNil(t, killed, "no kill line in:\n%s", out)
			require.NotNil(t, taken, "no takeover line in:\n%s", out)
			require.Equal(t, killed[1], taken[1], "the SDK took over the lease of the client the demo killed")
			require.Contains(t, out, "is in the ledger: the server finished the charge although its client was dead")
			require.Contains(t, out, "POST key "+key+": 201, payment", "the server committed the killed client's charge")
			if strings.Contains(out, "<- 409 Conflict") {
				// Timing gave a 409: it came before the replay.
				requireInOrder(t, out, "resuming it", "<- 409 Conflict  Retry-After:", "<- 201 Created  Idempotent-Replayed: true")
				require.Contains(t, out, "409 in-flight")
			}
			requireCleanedUp(t, r)
		})
	}
}

// requireInOrder requires each of subs in s, each after the previous one.
func requireInOrder(t *testing.T, s string, subs ...string) {
	t.Helper()
	at := 0
	for _, sub := range subs {
		i := strings.Index(s[at:], sub)
		require.GreaterOrEqual(t, i, 0, "%q missing after offset %d in:\n%s", sub, at, s)
		at += i + len(sub)
	}
}

// TestDemo_Interrupt sends SIGINT (Ctrl-C) while a payment is in flight: the
// demo stops every process it started and removes its temp dir.
func TestDemo_Interrupt(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	bin := buildBinary(t)
	r := startDemo(t, bin)
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
wait:
	for {
		select {
		case line := <-r.lines:
			if strings.Contains(line, "charge started") {
				break wait
			}
		case err := <-r.done:
			t.Fatalf("the demo exited (%v) before a charge started:\n%s", err, r.stdout)
		case <-timeout.C:
			t.Fatalf("no charge started within 30s:\n%s", r.stdout)
		}
	}
	require.NoError(t, r.cmd.Process.Signal(os.Interrupt))
	code := r.wait(t)
	out := r.stdout.String()
	require.Equal(t, exitInterrupted, code, "stdout:\n%s\nstderr:\n%s", out, r.stderr)
	require.Contains(t, out, "cleanup: interrupted; stopped server (pid")
	require.NotContains(t, out, "VERDICT")
	require.Contains(t, r.stderr.String(), "interrupted")
	requireCleanedUp(t, r)
}

func TestParseFlags(t *testing.T) {
	t.Parallel()

	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, options{delay: 3 * time.Second}, o)

	o, err = parseFlags([]string{"--dsn", "postgres://x", "--delay", "5s", "--keep", "--verbose"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, options{dsn: "postgres://x", delay: 5 * time.Second, keep: true, verbose: true}, o)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--delay", "500ms"}, "--delay"},
		{[]string{"--delay", "11s"}, "--delay"},
		{[]string{"--nope"}, "nope"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		var stderr testkit.SyncBuffer
		_, err := parseFlags(tc.args, &stderr)
		require.Error(t, err, "args %q", tc.args)
		require.Contains(t, err.Error()+stderr.String(), tc.want, "args %q", tc.args)
	}
}

func TestClientTiming(t *testing.T) {
	t.Parallel()
	// The client runs on the SDK's defaults. Its lifetime is shorter than
	// the killed client's lease: the restarted client can only finish by
	// taking the dead client's lease over, never by waiting it out.
	sdk := (*idemkit.Config)(nil).WithDefaults()
	require.Greater(t, sdk.LeaseDuration, clientTimeout+maxDelay)
	require.Greater(t, sdk.AttemptTimeout, serverLockTimeout, "a 409 must come back within one attempt")
	require.Greater(t, sdk.AttemptTimeout, maxDelay, "the handler's answer comes back within one attempt")
}
