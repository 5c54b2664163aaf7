package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/conform"
)

// skipUnlessCI skips the test with why, except under CI=true, where it
// fails it.
func skipUnlessCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// check runs against an idempotency implementation written by someone
// else: express-idempotency 1.0.6 (npm, MIT) on express 4.21.2, installed
// by the test into its temp dir and started on 127.0.0.1. Under the ietf
// profile (its 409 and 417 are the draft's), it passes replay, changed
// body (417), concurrent duplicates (Node runs its in-memory adapter's
// look-up and insert without yielding) and error storage (a 400 is not
// stored), and fails:
//   - in-flight: the 409 comes from express's default error handler, an
//     HTML page without Retry-After;
//   - scoped: keys are global, so a second caller's request with the same
//     key gets the first caller's payment;
//   - hostile-keys: any non-empty header value is a key, so an over-long
//     key, an empty quoted key and a repeated header (joined by Node into
//     one value) are executed; only the control character is refused, by
//     Node's HTTP parser.
//
// The window cannot be told: it publishes none.
func TestCheck_ExpressIdempotencyMiddleware(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		skipUnlessCI(t, "node is not installed: cannot run express-idempotency (install Node.js and npm to run this test)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		skipUnlessCI(t, "npm is not installed: cannot install express-idempotency (install npm to run this test)")
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "server.js"} {
		b, err := os.ReadFile(filepath.Join("testdata", "express", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	installCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := exec.CommandContext(installCtx, npm, "install", "--no-audit", "--no-fund", "--ignore-scripts",
		"--loglevel=error", "--cache", filepath.Join(dir, "npm-cache"))
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		skipUnlessCI(t, "npm install express-idempotency failed (no network to the npm registry?): %v\n%s", err, out)
	}

	ctx, stop := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, node, "server.js")
	srv.Dir = dir
	srv.Env = append(os.Environ(), "DELAY_MS=300")
	logPath := filepath.Join(dir, "node-stderr.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	srv.Stderr = logFile // the middleware logs a stack trace per 409
	stdout, err := srv.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	t.Cleanup(func() {
		stop() // kills the node process started above
		_ = srv.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("node stderr:\n%s", b)
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
		}
	}()
	var url string
	select {
	case l := <-lines:
		var ok bool
		url, ok = strings.CutPrefix(l, "listening on ")
		require.True(t, ok, "node printed %q", l)
	case <-time.After(30 * time.Second):
		t.Fatal("node server.js did not print its address within 30s")
	}

	code, verdicts, _ := checkVerdicts(t, checkArgs(url+"/v1/payments", "--profile", "ietf",
		"--error-data", `{"amount": -1, "currency": "USD"}`)...)
	require.Equal(t, exitCheckFailed, code)
	require.Equal(t, map[string]conform.Verdict{
		conform.PropReplay:       conform.Pass,
		conform.PropWindow:       conform.CannotTell,
		conform.PropChangedBody:  conform.Pass,
		conform.PropConcurrent:   conform.Pass,
		conform.PropInFlight:     conform.Fail,
		conform.PropScoped:       conform.Fail,
		conform.PropHostileKeys:  conform.Fail,
		conform.PropErrorStorage: conform.Pass,
	}, verdicts)
}
