package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testbin"
	"github.com/idemkit/idemkit/internal/testkit"
)

// binDir holds the idemkit binary built once for the tests that run it.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binBuild error
)

// idemkitBin is the idemkit binary: $IDEMKIT_CLI_BIN if set (to run these
// tests against another build), else this package built once.
func idemkitBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEMKIT_CLI_BIN"); p != "" {
		return p
	}
	if testing.Short() {
		t.Skip("-short: skips building the binary")
	}
	binOnce.Do(func() {
		binDir, binBuild = os.MkdirTemp("", "idemkit-cli-test-")
		if binBuild != nil {
			return
		}
		binPath = filepath.Join(binDir, "idemkit")
		out, err := exec.Command(testbin.GoTool(), "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binBuild = errors.New(string(out))
		}
	})
	require.NoError(t, binBuild, "go build")
	return binPath
}

// payAPI is the payments example API (internal/paymentsapi) on a loopback
// port, SQLite in a temporary file.
type payAPI struct {
	*httptest.Server
	app     *paymentsapi.App
	started chan string // keys whose charge started
}

func newPayAPI(t *testing.T, delay time.Duration) *payAPI {
	t.Helper()
	a := &payAPI{started: make(chan string, 16)}
	app, err := paymentsapi.Open(testkit.Ctx(t), &paymentsapi.Config{
		DB: filepath.Join(t.TempDir(), "payments.db"), Delay: delay, SweepInterval: -1,
		Logger: slog.New(slog.DiscardHandler),
		OnChargeStartFunc: func(_, key string) {
			select {
			case a.started <- key:
			default:
			}
		},
	})
	require.NoError(t, err)
	a.app = app
	a.Server = httptest.NewServer(app.Handler())
	t.Cleanup(func() {
		a.Close()
		app.Close()
	})
	return a
}

func (a *payAPI) payments(t *testing.T, account string) int {
	t.Helper()
	p, err := a.app.Payments(testkit.Ctx(t), account)
	require.NoError(t, err)
	return len(p)
}

// deadURL is an http URL on a loopback port nobody listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "http://" + addr + "/v1/payments"
}

type binResult struct {
	code           int
	stdout, stderr string
}

// binEnv is the environment of the binary: HOME in a temporary directory,
// nothing else of the test's own environment but PATH.
func binEnv(t *testing.T, vars ...string) []string {
	return append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, vars...)
}

// runBin runs the binary to completion.
func runBin(t *testing.T, vars []string, stdin string, args ...string) binResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(testkit.Ctx(t), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemkitBin(t), args...)
	cmd.Env = vars
	cmd.Stdin = strings.NewReader(stdin)
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
		t.Fatalf("idemkit %v: %v", args, err)
	}
	return r
}

const usd40 = `{"amount": 4000, "currency": "USD", "description": "test"}`

// TestResume_InterruptedDoHintResumesWithCredentials is the resume story:
// `do` with a credential is interrupted (SIGINT) while the server makes the
// payment; it exits 130 and prints a command that resumes, with a
// placeholder for the credential and never its value; that command, with
// the credential filled in, finishes the intent under the same key: one
// payment, reported as replayed.
func TestResume_InterruptedDoHintResumesWithCredentials(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 1500*time.Millisecond)
	const account = "acct_s3cr3t_7"
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)

	stderr := interruptDo(t, api, vars, "do", "--queue", queue, "--url", api.URL+"/v1/payments",
		"-H", "Content-Type: application/json", "-H", "Authorization: Bearer "+account, "--data", usd40)
	require.NotContains(t, stderr, account, "the credential is never printed")

	// The hint: a command line that resumes.
	hint := resumeCommand(t, stderr)
	require.Contains(t, hint, "--until-done")
	require.Contains(t, hint, "--queue "+queue)
	require.Contains(t, hint, `-H "Authorization: $IDEMKIT_AUTHORIZATION"`, "names the credential it needs, as a variable")

	r := runBin(t, vars, "", hintArgs(t, hint, "Authorization: Bearer "+account)...)
	require.Equal(t, exitOK, r.code, "the hint resumes: %s", r.stderr)
	require.Contains(t, r.stdout, "succeeded 201 Created, replayed=true", "the resumed intent is reported as a replay, not a fresh charge")
	require.Equal(t, 1, api.payments(t, account), "one payment")

	r = runBin(t, vars, "", "ls", "--queue", queue, "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Equal(t, "succeeded", got["state"])
	require.Equal(t, true, got["replayed"])
}

// interruptDo runs the idemkit do args against api, sends it SIGINT once
// the payment started, checks that it exits 130 with no body, and returns
// its stderr.
func interruptDo(t *testing.T, api *payAPI, vars []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(idemkitBin(t), args...)
	cmd.Env = vars
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-api.started:
	case err := <-exited:
		t.Fatalf("do exited (%v) before the payment started; stderr:\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the payment never started; stderr:\n%s", stderr.String())
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := <-exited
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", stderr.String())
	require.Equal(t, exitSIGINT, ee.ExitCode(), "SIGINT exits 130; stderr:\n%s", stderr.String())
	require.Empty(t, stdout.String(), "no body: there is no outcome yet")
	return stderr.String()
}

// resumeCommand is the last "idemkit run ..." line of stderr.
func resumeCommand(t *testing.T, stderr string) string {
	t.Helper()
	var hint string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "idemkit run ") {
			hint = strings.TrimSpace(l)
		}
	}
	require.NotEmpty(t, hint, "no resume command in:\n%s", stderr)
	return hint
}

// hintArgs are the arguments of a resume command with the credential
// variable reference "Authorization: $IDEMKIT_AUTHORIZATION" replaced by cred.
func hintArgs(t *testing.T, hint, cred string) []string {
	t.Helper()
	args := shellSplit(t, strings.TrimPrefix(hint, "idemkit "))
	for i, a := range args {
		if a == "Authorization: $IDEMKIT_AUTHORIZATION" {
			args[i] = cred
		}
	}
	return args
}

// shellSplit splits a command line with single and double quotes (what
// resumeHint writes), expanding nothing.
func shellSplit(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	var quote rune
	has := false
	for _, r := range s {
		inQuote := quote != 0
		switch {
		case (r == '\'' || r == '"') && quote == 0:
			quote, has = r, true
		case r == quote:
			quote = 0
		case r == ' ' && !inQuote:
			if has {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	require.Zero(t, quote, "unbalanced quote in %q", s)
	if has {
		out = append(out, cur.String())
	}
	return out
}

// TestDo_SummaryTellsFreshFromReplay: do prints the body on stdout and a
// summary line with state, status, replayed and attempts on stderr; --json
// prints the intent with its outcome.
func TestDo_SummaryTellsFreshFromReplay(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)
	args := []string{"do", "--queue", queue, "--url", api.URL + "/v1/payments", "-H", "Authorization: Bearer alice", "--key", "k-1", "--data", usd40}
	r := runBin(t, vars, "", args...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.True(t, json.Valid([]byte(r.stdout)), "stdout is the body: %q", r.stdout)
	require.Contains(t, r.stderr, "succeeded 201 Created, replayed=false, attempts=1")

	// The same key again from another queue: the server replays.
	other := filepath.Join(t.TempDir(), "other.db")
	r2 := runBin(t, vars, "", "do", "--queue", other, "--url", api.URL+"/v1/payments", "-H", "Authorization: Bearer alice", "--key", "k-1", "--data", usd40, "--json")
	require.Equal(t, exitOK, r2.code, r2.stderr)
	var j struct {
		State    string `json:"state"`
		Status   int    `json:"status"`
		Replayed bool   `json:"replayed"`
		Attempts int    `json:"attempts"`
		Outcome  struct {
			Body string `json:"body"`
		} `json:"outcome"`
	}
	require.NoError(t, json.Unmarshal([]byte(r2.stdout), &j), r2.stdout)
	require.Equal(t, "succeeded", j.State)
	require.Equal(t, 201, j.Status)
	require.True(t, j.Replayed)
	require.JSONEq(t, r.stdout, j.Outcome.Body, "the replay is the same payment")
	require.Contains(t, r2.stderr, "replayed=true")
	require.Equal(t, 1, api.payments(t, "alice"))
}

// TestExitCodes: 1 usage, 2 stopped with work left (--timeout,
// --max-attempts), 3 a definitive failure (a 4xx; a key reused, in the
// local queue or on the server), 4 expired.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	dead := deadURL(t)
	dir := t.TempDir()
	vars := binEnv(t)
	pay := api.URL + "/v1/payments"
	auth := "Authorization: Bearer bob"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"usage", []string{"do", "--queue", filepath.Join(dir, "u.db")}, exitError, []string{"--url is required"}},
		{"bad flag", []string{"ls", "--nope"}, exitError, []string{"unknown flag"}},
		{"failed 400", []string{"do", "--queue", filepath.Join(dir, "f.db"), "--url", pay, "-H", auth, "--data", `{"amount":-1}`},
			exitFailed, []string{"failed 400 Bad Request, replayed=false, attempts=1"}},
		{"timeout", []string{"do", "--queue", filepath.Join(dir, "t.db"), "--url", dead, "-H", auth, "--data", usd40, "--timeout", "1s"},
			exitInterrupted, []string{"--timeout 1s reached", "connection refused", "idemkit run --queue", `-H "Authorization: $IDEMKIT_AUTHORIZATION"`}},
		{"max attempts", []string{"do", "--queue", filepath.Join(dir, "m.db"), "--url", dead, "--data", usd40, "--max-attempts", "2"},
			exitInterrupted, []string{"--max-attempts 2 reached", "attempts=2"}},
		{"expired", []string{"do", "--queue", filepath.Join(dir, "e.db"), "--url", dead, "--data", usd40, "--window", "1s"},
			exitExpired, []string{"expired (outcome unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, vars, "", tc.args...)
			require.Equal(t, tc.code, r.code, "stderr:\n%s", r.stderr)
			for _, s := range tc.stderr {
				require.Contains(t, r.stderr, s)
			}
			require.NotContains(t, r.stderr, "Bearer bob")
		})
	}

	t.Run("key reused", func(t *testing.T) {
		t.Parallel()
		q1, q2 := filepath.Join(dir, "k1.db"), filepath.Join(dir, "k2.db")
		r := runBin(t, vars, "", "do", "--queue", q1, "--url", pay, "-H", auth, "--key", "same", "--data", usd40)
		require.Equal(t, exitOK, r.code, r.stderr)
		// In the local queue: refused before sending.
		r = runBin(t, vars, "", "do", "--queue", q1, "--url", pay, "-H", auth, "--key", "same", "--data", `{"amount": 1, "currency": "USD"}`)
		require.Equal(t, exitFailed, r.code, r.stderr)
		require.Contains(t, r.stderr, "already in the queue with a different request")
		// On the server (another queue): its 422.
		r = runBin(t, vars, "", "do", "--queue", q2, "--url", pay, "-H", auth, "--key", "same", "--data", `{"amount": 1, "currency": "USD"}`)
		require.Equal(t, exitFailed, r.code, r.stderr)
		require.Contains(t, r.stderr, "failed 422 Unprocessable Entity")
		require.Equal(t, 1, api.payments(t, "bob"))
	})
}

// TestRetries_AreVisible: do reports each retry and its reason as it
// happens (a wrong port is not silent); -v also shows every attempt.
func TestRetries_AreVisible(t *testing.T) {
	t.Parallel()
	dead := deadURL(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	r := runBin(t, binEnv(t), "", "do", "--queue", queue, "--url", dead, "--data", usd40, "--max-attempts", "2", "-v")
	require.Equal(t, exitInterrupted, r.code, r.stderr)
	require.Regexp(t, `attempt 1: .*connection refused; (retrying in \S+|next attempt at \S+) with the same key`, r.stderr)
	require.Contains(t, r.stderr, "attempt 2: "+strings.TrimSuffix(dead, "/v1/payments"))
}

// TestQueue_OneDefaultForEveryCommand: IDEMKIT_QUEUE, else the XDG state
// directory, names the queue of every command; ls and show never create a
// file; errors are words.
func TestQueue_OneDefaultForEveryCommand(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	pay := api.URL + "/v1/payments"

	state := t.TempDir()
	vars := binEnv(t, "XDG_STATE_HOME="+state)
	r := runBin(t, vars, "", "ls")
	require.Equal(t, exitError, r.code)
	want := filepath.Join(state, "idemkit", "queue.db")
	require.Contains(t, r.stderr, "no queue at "+want)
	require.NoFileExists(t, want, "ls never creates the queue")
	r = runBin(t, vars, "", "do", "--url", pay, "-H", "Authorization: Bearer carol", "--data", usd40)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.FileExists(t, want)
	r = runBin(t, vars, "", "ls", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `"state":"succeeded"`)

	envQueue := filepath.Join(t.TempDir(), "env.db")
	vars = binEnv(t, "IDEMKIT_QUEUE="+envQueue)
	r = runBin(t, vars, "", "submit", "--url", pay, "--data", usd40)
	require.Equal(t, exitOK, r.code, r.stderr)
	id := strings.TrimSpace(r.stdout)
	r = runBin(t, vars, "", "show", shortID(id))
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "State:       pending")

	typo := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{{"ls"}, {"show", "x"}, {"cancel", "x"}, {"prune"}} {
		r = runBin(t, vars, "", append(args, "--queue", typo)...)
		require.Equal(t, exitError, r.code, "%v", args)
		require.Contains(t, r.stderr, "no queue at "+typo, "%v", args)
		require.NoFileExists(t, typo)
	}

	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "q.db")
	r = runBin(t, vars, "", "do", "--queue", missing, "--url", pay, "--data", usd40)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "does not exist")
	require.NotContains(t, r.stderr, "(14)")
	require.NotContains(t, r.stderr, "unable to open database file")
}

// TestRun_ProgressAndEndedIntents: run prints every intent that ended on
// stdout (a line, or JSON with --json) and the counts on stderr; a 401
// without -H says that credentials are never stored.
func TestRun_ProgressAndEndedIntents(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 0)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t, "IDEMKIT_QUEUE="+queue)
	for _, body := range []string{usd40, `{"amount": 5, "currency": "EUR"}`} {
		r := runBin(t, vars, "", "submit", "--url", api.URL+"/v1/payments", "-H", "Content-Type: application/json", "--data", body)
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	r := runBin(t, vars, "", "run", "--until-done")
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "failed 401 Unauthorized"), r.stdout)
	require.Contains(t, r.stderr, "0 pending, 0 succeeded, 2 failed")
	require.Contains(t, r.stderr, "credential headers are never stored; give them with -H")

	queue2 := filepath.Join(t.TempDir(), "q2.db")
	vars = binEnv(t, "IDEMKIT_QUEUE="+queue2)
	for range 3 {
		r := runBin(t, vars, "", "submit", "--url", api.URL+"/v1/payments", "--data", usd40)
		require.Equal(t, exitOK, r.code, r.stderr)
	}
	r = runBin(t, vars, "", "run", "--until-done", "--json", "-H", "Authorization: Bearer dave")
	require.Equal(t, exitOK, r.code, r.stderr)
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	n := 0
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		for _, f := range []string{"id", "key", "state", "status", "replayed", "attempts", "next_attempt_at", "last_error"} {
			require.Contains(t, m, f)
		}
		require.Equal(t, "succeeded", m["state"])
		n++
	}
	require.Equal(t, 3, n)
	require.Equal(t, 3, api.payments(t, "dave"))
}

// TestVersion prints the module version and the queue schema version.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := runBin(t, binEnv(t), "", "--version")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `^idemkit \S+ \(.*go1\.\d+.*\)\nqueue schema: [1-9]\d*\n$`, r.stdout)
}

// TestRun_SIGINTExits130: run, stopped by SIGINT, exits 130; SIGTERM is the
// service stop and exits 0.
func TestRun_SIGINTExits130(t *testing.T) {
	t.Parallel()
	queue := filepath.Join(t.TempDir(), "q.db")
	for sig, want := range map[os.Signal]int{os.Interrupt: exitSIGINT, syscall.SIGTERM: exitOK} {
		cmd := exec.Command(idemkitBin(t), "run", "--queue", queue)
		cmd.Env = binEnv(t)
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		// The first progress line says run is up.
		line, err := bufio.NewReader(stderr).ReadString('\n')
		require.NoError(t, err)
		require.Contains(t, line, "0 pending")
		go func() { _, _ = io.Copy(io.Discard, stderr) }()
		require.NoError(t, cmd.Process.Signal(sig))
		err = cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		require.Equal(t, want, code, "%v", sig)
	}
}

// TestWindow_LateResumeExpiresInsteadOfResending: with --window (a server
// that forgets keys sooner than 24 h and does not say so), a do
// interrupted mid-payment and resumed after the window is not sent again
// (the server might have forgotten the key and charge twice): the printed
// command keeps --window, and run ends the intent expired (exit 4) with no
// new attempt.
func TestWindow_LateResumeExpiresInsteadOfResending(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 1500*time.Millisecond)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)
	stderr := interruptDo(t, api, vars, "do", "--queue", queue, "--url", api.URL+"/v1/payments",
		"-H", "Authorization: Bearer hana", "--data", usd40, "--key", "late", "--window", "1s")
	hint := resumeCommand(t, stderr)
	require.Contains(t, hint, "--window 1s")

	r := runBin(t, vars, "", "show", "--queue", queue, "late", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var before struct {
		Horizon time.Time `json:"horizon"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &before))
	require.False(t, before.Horizon.IsZero())
	// The resume comes late: wait out the horizon itself.
	<-time.After(time.Until(before.Horizon) + 100*time.Millisecond)

	r = runBin(t, vars, "", hintArgs(t, hint, "Authorization: Bearer hana")...)
	require.Equal(t, exitExpired, r.code, r.stderr)
	require.Contains(t, r.stdout, "expired (outcome unknown")
	r = runBin(t, vars, "", "show", "--queue", queue, "late", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var after struct {
		State      string `json:"state"`
		AttemptLog []any  `json:"attempt_log"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &after))
	require.Equal(t, "expired", after.State)
	require.Len(t, after.AttemptLog, 1, "no attempt after the window")
	// The server finishes the interrupted attempt's payment (after its delay): that one only.
	require.Eventually(t, func() bool { return api.payments(t, "hana") == 1 }, 20*time.Second, 20*time.Millisecond)
}
