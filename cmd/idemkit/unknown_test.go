package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
)

// shellPaste runs a line exactly as printed, through sh, with the idemkit
// binary first on PATH and the environment vars.
func shellPaste(t *testing.T, vars []string, line string) binResult {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Symlink(idemkitBin(t), filepath.Join(dir, "idemkit")))
	ctx, cancel := context.WithTimeout(testkit.Ctx(t), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Env = append(append([]string(nil), vars...), "PATH="+dir+":"+os.Getenv("PATH")) // last wins
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := binResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("sh -c %q: %v", line, err)
	}
	return r
}

// lsState is the state of the only intent of queue, as ls --json says.
func lsState(t *testing.T, vars []string, queue, id string) map[string]any {
	t.Helper()
	r := runBin(t, vars, "", "show", "--queue", queue, "--json", id)
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	return got
}

// TestDoubleCharge_InterruptedDoPastedHintAndRetryChargeOnce is the issue's
// double charge, walked the way the user walked it, with the payments
// example: do is interrupted while the server makes the payment; the hint
// is pasted exactly as printed; retry --yes; run. The hint carries no
// value that could be sent (it is refused until the credential's variable
// is set); a later 401 (a wrong credential) after the lost answer leaves
// the intent "unknown" (exit 4), never "failed"; retry under a new key
// refuses it, naming the attempt whose answer was lost; run sends nothing
// more; retry --same-key settles it with the server's replay. One charge.
func TestDoubleCharge_InterruptedDoPastedHintAndRetryChargeOnce(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 1500*time.Millisecond)
	const account = "acct_demo"
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)

	stderr := interruptDo(t, api, vars, "do", "--queue", queue, "--url", api.URL+"/v1/payments",
		"-H", "Content-Type: application/json", "-H", "Authorization: Bearer "+account, "--data", usd40)
	require.NotContains(t, stderr, account)
	hint := resumeCommand(t, stderr)
	require.NotContains(t, hint, "…", "no placeholder that could be sent")
	id := uuidRe.FindString(stderr)
	require.NotEmpty(t, id, "the intent id is printed:\n%s", stderr)

	// Pasted exactly as printed, without the variable set: refused, nothing sent.
	r := shellPaste(t, vars, hint)
	require.Equal(t, exitError, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "IDEMKIT_AUTHORIZATION")
	require.Contains(t, r.stderr, "nothing was sent")
	require.Equal(t, "pending", lsState(t, vars, queue, id)["state"])

	// The old hint's placeholder, typed in: refused too.
	r = runBin(t, vars, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: …")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, "placeholder")

	// retry --yes on the pending intent: refused.
	r = runBin(t, vars, "", "retry", "--queue", queue, "--yes", id)
	require.NotEqual(t, exitOK, r.code, r.stderr)

	// A credential that the server refuses (401, before it looks the key
	// up): the outcome is unknown, not failed.
	r = runBin(t, vars, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer not an account!")
	require.Equal(t, exitExpired, r.code, "outcome unknown exits 4; stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "unknown 401 Unauthorized")
	require.Contains(t, r.stdout, "outcome unknown")
	got := lsState(t, vars, queue, id)
	require.Equal(t, "unknown", got["state"])
	require.Contains(t, got["last_error"], "attempt 1 got no answer")
	r = runBin(t, vars, "", "ls", "--queue", queue)
	require.Contains(t, r.stdout, "unknown")

	// retry --yes, as the user did: refused, naming the attempt.
	r = runBin(t, vars, "", "retry", "--queue", queue, "--yes", id)
	require.Equal(t, exitExpired, r.code, r.stderr)
	require.Contains(t, r.stderr, "attempt 1 (started ")
	require.Contains(t, r.stderr, "--same-key")
	require.Contains(t, r.stderr, "--i-accept-double-charge")

	// run: nothing to send.
	r = runBin(t, vars, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer "+account)
	require.Equal(t, exitOK, r.code, r.stderr)

	// The way out: resend under the same key; its hint, pasted with the
	// variable set.
	r = runBin(t, vars, "", "retry", "--queue", queue, "--same-key", id)
	require.Equal(t, exitOK, r.code, r.stderr)
	r = shellPaste(t, append(vars, "IDEMKIT_AUTHORIZATION=Bearer "+account), resumeCommand(t, r.stderr))
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "succeeded 201 Created, replayed=true")
	require.Equal(t, 1, api.payments(t, account), "one charge")
	require.Equal(t, "succeeded", lsState(t, vars, queue, id)["state"])
}

// TestResume_HintPastedAsPrintedResumes: the resume hint of an interrupted
// do, pasted exactly as printed into a shell with the credential's
// variable set, finishes the intent under the same key.
func TestResume_HintPastedAsPrintedResumes(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 1500*time.Millisecond)
	const account = "acct_paste"
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)
	stderr := interruptDo(t, api, vars, "do", "--queue", queue, "--url", api.URL+"/v1/payments",
		"-H", "Authorization: Bearer "+account, "--data", usd40)
	r := shellPaste(t, append(vars, "IDEMKIT_AUTHORIZATION=Bearer "+account), resumeCommand(t, stderr))
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "succeeded 201 Created, replayed=true")
	require.Equal(t, 1, api.payments(t, account))
}

// TestDo_SecondSIGINTStillPrintsTheHint: Ctrl-C pressed twice (or a process
// group signalled twice) still prints the intent id and the resume
// command before do exits 130.
func TestDo_SecondSIGINTStillPrintsTheHint(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 3*time.Second)
	queue := filepath.Join(t.TempDir(), "q.db")
	cmd := exec.Command(idemkitBin(t), "do", "--queue", queue, "--url", api.URL+"/v1/payments",
		"-H", "Authorization: Bearer acct_twice", "--data", usd40)
	cmd.Env = binEnv(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-api.started:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("the payment never started")
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := <-exited
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitSIGINT, ee.ExitCode())
	out := stderr.String()
	require.Regexp(t, uuidRe, out, "the intent id:\n%s", out)
	hint := resumeCommand(t, out)
	require.Contains(t, hint, "--queue "+queue)
	require.Equal(t, 1, strings.Count(out, "idemkit run --queue"), "printed once:\n%s", out)
}

// TestShow_NamesHolderAndRunTakesOverAKilledDo: while do sends, show names
// the lease holder (pid, host); do is SIGKILLed mid-request; run takes its
// intent over at once (not after the lease), says so, and the payment is
// made once.
func TestShow_NamesHolderAndRunTakesOverAKilledDo(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 2*time.Second)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)
	cmd := exec.Command(idemkitBin(t), "do", "--queue", queue, "--url", api.URL+"/v1/payments",
		"-H", "Authorization: Bearer acct_killed", "--key", "k-killed", "--data", usd40)
	cmd.Env = vars
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-api.started:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("the payment never started")
	}
	r := runBin(t, vars, "", "show", "--queue", queue, "k-killed")
	require.Equal(t, exitOK, r.code, r.stderr)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Regexp(t, `Leased by:\s+pid `+strconv.Itoa(cmd.Process.Pid)+` on `+regexp.QuoteMeta(host)+` until `, r.stdout)
	r = runBin(t, vars, "", "show", "--queue", queue, "--json", "k-killed")
	require.Contains(t, r.stdout, `"holder_pid":`+strconv.Itoa(cmd.Process.Pid))

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
	start := time.Now()
	r = runBin(t, vars, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer acct_killed")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Less(t, time.Since(start), time.Minute, "taken over at once, not after the 2m lease")
	require.Contains(t, r.stderr, "taking over intent of dead process pid "+strconv.Itoa(cmd.Process.Pid))
	require.Contains(t, r.stdout, "succeeded 201 Created")
	require.Equal(t, 1, api.payments(t, "acct_killed"))
}

// TestHeaders_PlaceholdersAreRefused: a header value that is a hint's
// placeholder, an unexpanded variable or an empty credential is refused
// before anything is sent (exit 1); ordinary values pass.
func TestHeaders_PlaceholdersAreRefused(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"Authorization: …", "Authorization: Bearer …", "Authorization: ...", "Authorization: $IDEMKIT_AUTHORIZATION",
		"Authorization: Bearer ${TOKEN}", "Authorization:", "Cookie: ", "X-Api-Key: …"} {
		_, err := parseHeaders([]string{bad})
		require.Error(t, err, bad)
		require.Equal(t, exitError, exitCode(err), bad)
		require.Contains(t, err.Error(), "nothing was sent", bad)
	}
	for _, good := range []string{"Authorization: Bearer acct_demo", "X-Price: $5", "X-Note:", "Content-Type: application/json"} {
		_, err := parseHeaders([]string{good})
		require.NoError(t, err, good)
	}
}
