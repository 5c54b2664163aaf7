package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetries_EveryConnectionErrorIsVisible: a wrong port, an unknown host
// and https:// against the plain-HTTP payments example each print the
// connection error as it happens (not silence until Ctrl-C), and show
// keeps that error as the last one.
func TestRetries_EveryConnectionErrorIsVisible(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	for _, tc := range []struct {
		name, url, want string
	}{
		{"wrong port", deadURL(t), "connection refused"},
		// .onion never resolves (RFC 7686): no DNS server is asked.
		{"unknown host", "http://no-such-host.onion/v1/payments", "no-such-host.onion"},
		{"https to plain http", "https://" + strings.TrimPrefix(api.URL, "http://") + "/v1/payments", "(HTTPS client|tls: )"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			queue := filepath.Join(t.TempDir(), "q.db")
			vars := binEnv(t)
			r := runBin(t, vars, "", "do", "--queue", queue, "--url", tc.url, "-H", "Authorization: Bearer erin",
				"--data", usd40, "--key", "k", "--max-attempts", "2")
			require.Equal(t, exitInterrupted, r.code, r.stderr)
			require.Regexp(t, `attempt 1: .*`+tc.want+`.*; retrying in \S+ with the same key`, r.stderr, "the first retry is reported")
			require.Contains(t, r.stderr, "idemkit run --queue "+queue+" --until-done")
			r = runBin(t, vars, "", "show", "--queue", queue, "k")
			require.Equal(t, exitOK, r.code, r.stderr)
			require.Regexp(t, `Last error:  [^\n]*`+tc.want, r.stdout)
			require.Equal(t, 0, api.payments(t, "erin"))
		})
	}
}

// TestDo_InterruptedKeepsTheConnectionError: do against a wrong port,
// stopped by SIGINT while it waits to retry, exits 130; show says the
// connection error, not "context canceled".
func TestDo_InterruptedKeepsTheConnectionError(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)
	cmd := exec.Command(idemkitBin(t), "do", "--queue", queue, "--url", deadURL(t), "--data", usd40, "--key", "k")
	cmd.Env = vars
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var stderr bytes.Buffer
	br := bufio.NewReader(io.TeeReader(pipe, &stderr))
	retried := make(chan bool, 1)
	done := make(chan struct{}) // closed once stderr is read to its end
	go func() {
		defer close(done)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				retried <- false
				return
			}
			if strings.Contains(line, "connection refused") {
				retried <- true
				_, _ = io.Copy(io.Discard, br)
				return
			}
		}
	}()
	select {
	case ok := <-retried:
		if !ok {
			<-done
			_ = cmd.Wait()
			t.Fatalf("no retry line in:\n%s", stderr.String())
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		t.Fatalf("do never reported the connection error")
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	<-done
	err = cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "stderr:\n%s", stderr.String())
	require.Equal(t, exitSIGINT, ee.ExitCode(), stderr.String())
	require.Contains(t, stderr.String(), "idemkit run --queue "+queue+" --until-done")

	r := runBin(t, vars, "", "show", "--queue", queue, "k")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Last error:  [^\n]*connection refused`, r.stdout)
	require.NotContains(t, r.stdout, "Last error:  context canceled")
}

// TestFailedIntents_DoNotBlockTheQueue is the failed-intent story against
// the payments example: an intent that failed (401: run without its
// credential) does not make later `run --until-done` exit 3; `retry`
// re-queues it under a new key after a confirmation and it succeeds;
// `prune --state failed` deletes the failure and keeps every receipt.
func TestFailedIntents_DoNotBlockTheQueue(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	pay := api.URL + "/v1/payments"
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t, queueEnv+"="+queue)
	auth := "Authorization: Bearer frank"

	r := runBin(t, vars, "", "submit", "--url", pay, "-H", "Content-Type: application/json", "--data", usd40)
	require.Equal(t, exitOK, r.code, r.stderr)
	failedID := strings.TrimSpace(r.stdout)
	r = runBin(t, vars, "", "run", "--until-done")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stdout, "failed 401 Unauthorized")
	require.Contains(t, r.stderr, "idemkit retry "+shortID(failedID))

	// A later run is judged by its own intents.
	r = runBin(t, vars, "", "submit", "--url", pay, "--data", `{"amount": 7, "currency": "EUR"}`)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runBin(t, vars, "", "run", "--until-done", "-H", auth)
	require.Equal(t, exitOK, r.code, "the old failure is not this run's: %s", r.stderr)
	r = runBin(t, vars, "", "run", "--until-done", "--all")
	require.Equal(t, exitFailed, r.code, r.stderr)

	// cancel refuses a failed intent; retry needs a yes.
	r = runBin(t, vars, "", "cancel", shortID(failedID))
	require.Equal(t, exitError, r.code, r.stderr)
	r = runBin(t, vars, "no\n", "retry", shortID(failedID))
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, "not confirmed")
	r = runBin(t, vars, "yes\n", "retry", shortID(failedID), "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var retried map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &retried), r.stdout)
	require.Equal(t, failedID+"~retry1", retried["key"], "a new key")
	r = runBin(t, vars, "", "run", "--until-done", "-H", auth)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "succeeded 201 Created, replayed=false")
	require.Equal(t, 2, api.payments(t, "frank"))

	r = runBin(t, vars, "", "prune", "--older-than", "0s", "--state", "failed")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "1\n", r.stdout)
	r = runBin(t, vars, "", "ls", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, `"state":"succeeded"`), "the receipts are kept: %s", r.stdout)
	require.NotContains(t, r.stdout, `"state":"failed"`)
	r = runBin(t, vars, "", "run", "--until-done", "--all")
	require.Equal(t, exitOK, r.code, "nothing failed is left: %s", r.stderr)
}

// TestErrors_InWords: the small errors of a first session against the
// payments example, each in words with its exit status.
func TestErrors_InWords(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t, queueEnv+"="+queue)
	r := runBin(t, vars, "", "do", "--url", api.URL+"/v1/payments", "-H", "Authorization: Bearer gina", "--data", `{"amount": -1, "currency": "USD"}`, "--key", "neg")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "failed 400 Bad Request")
	require.NotContains(t, r.stderr, "status 400", "the status is said once")
	r = runBin(t, vars, "", "show", "neg")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "status 400")

	r = runBin(t, vars, "", "ls", "--state", "done")
	require.Equal(t, exitError, r.code)
	require.Equal(t, `idemkit: --state "done": want one of pending, succeeded, failed, unknown, expired, canceled`+"\n", r.stderr)
	r = runBin(t, vars, "", "show", "nope")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, `no intent with id, id prefix, short id or key "nope"`)
	start := time.Now()
	r = runBin(t, vars, "", "do", "--url", api.URL+"/v1/payments", "--data", usd40, "--timeout", "0.5s")
	require.Less(t, time.Since(start), 30*time.Second)
	require.Equal(t, exitFailed, r.code, "a missing credential is a 401, answered at once: %s", r.stderr)
}
