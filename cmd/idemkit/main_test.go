package main

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(cleanupM{m}))
}

// cleanupM removes the binary built for the tests after they ran.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	code := c.m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	return code
}

// cli runs the command in-process, with an empty environment.
func cli(t *testing.T, ctx context.Context, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cliEnv(t, ctx, nil, stdin, args...)
}

// cliEnv runs the command in-process with the environment vars.
func cliEnv(t *testing.T, ctx context.Context, vars map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }}
	code = e.run(ctx, args)
	return code, out.String(), errb.String()
}

// api is the real idemkit server middleware in front of a charges
// endpoint; the principal is the bearer token.
type api struct {
	*httptest.Server
	effects atomic.Int32
	mu      sync.Mutex
	auth    []string
}

func newAPI(t *testing.T) *api {
	t.Helper()
	ctx := testkit.Ctx(t)
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "server.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	a := &api{}
	mw, err := server.New(st, &server.Config{PrincipalFunc: func(r *http.Request) (string, error) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return "", errors.New("no token")
		}
		return tok, nil
	}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("bad")) {
			http.Error(w, `{"error":"bad amount"}`, http.StatusBadRequest)
			return
		}
		n := a.effects.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})
	h := mw.Wrap(mux)
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.auth = append(a.auth, r.Header.Get("Authorization"))
		a.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

// seen returns the Authorization headers received so far.
func (a *api) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.auth...)
}

var uuidLine = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`)

func TestCLI_SubmitRunLsShow(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	const secret = "sk_test_SECRET-777"

	code, out, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges",
		"-H", "Content-Type: application/json", "-H", "Authorization: Bearer "+secret, "--data", `{"amount":40}`)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, uuidLine, out, "the id alone on one line")
	id := strings.TrimSpace(out)
	require.Contains(t, errOut, "Authorization not stored")

	bodyFile := filepath.Join(t.TempDir(), "body.json")
	require.NoError(t, os.WriteFile(bodyFile, []byte(`{"amount":50}`), 0o600))
	code, out, errOut = cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", "@"+bodyFile, "--key", "my-key-1")
	require.Equal(t, 0, code, errOut)
	id2 := strings.TrimSpace(out)

	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "--concurrency", "2", "-H", "Authorization: Bearer "+secret)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "0 pending, 2 succeeded")
	require.EqualValues(t, 2, a.effects.Load())
	a.mu.Lock()
	require.Equal(t, []string{"Bearer " + secret, "Bearer " + secret}, a.auth, "run -H is sent")
	a.mu.Unlock()

	code, out, errOut = cli(t, ctx, "", "ls", "--queue", queue, "--json")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	byID := map[string]map[string]any{}
	for _, l := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		for _, f := range []string{"id", "key", "state", "attempts", "status", "replayed"} {
			require.Contains(t, m, f)
		}
		byID[m["id"].(string)] = m
	}
	require.Equal(t, "succeeded", byID[id]["state"])
	require.EqualValues(t, 201, byID[id]["status"])
	require.Equal(t, false, byID[id]["replayed"])
	require.Equal(t, "my-key-1", byID[id2]["key"])

	code, out, _ = cli(t, ctx, "", "ls", "--queue", queue, "--state", "pending")
	require.Equal(t, 0, code)
	require.Equal(t, 1, strings.Count(out, "\n"), "header line only")

	code, out, errOut = cli(t, ctx, "", "show", "--queue", queue, id, "--json")
	require.Equal(t, 0, code, errOut)
	var shown struct {
		Key        string `json:"key"`
		AttemptLog []struct {
			Status int `json:"status"`
		} `json:"attempt_log"`
		Outcome struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
		} `json:"outcome"`
		Header map[string][]string `json:"header"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Len(t, shown.AttemptLog, 1)
	require.Equal(t, 201, shown.AttemptLog[0].Status)
	require.Regexp(t, `^\{"charge":[12]\}$`, strings.TrimSpace(shown.Outcome.Body))
	require.NotContains(t, shown.Header, "Authorization")

	code, out, _ = cli(t, ctx, "", "show", "--queue", queue, id)
	require.Equal(t, 0, code)
	require.Contains(t, out, "Outcome:     201 Created")

	code, _, errOut = cli(t, ctx, "", "show", "--queue", queue, "no-such-id")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not found")

	for _, suffix := range []string{"", "-wal"} {
		raw, err := os.ReadFile(queue + suffix)
		if err == nil {
			require.False(t, bytes.Contains(raw, []byte("SECRET-777")), "token in the queue file%s", suffix)
		}
	}
}

func TestCLI_RunUntilDoneFails(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", `{"amount":"bad"}`)
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer acct")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "1 of this run's intents ended failed or canceled")
}

func TestCLI_Do(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	args := []string{"do", "--queue", queue, "--url", a.URL + "/charges", "--key", "k-do", "-H", "Authorization: Bearer acct", "--data", "@-"}
	code, out, errOut := cli(t, ctx, `{"amount":1}`, args...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, `{"charge":1}`, out)
	// The same intent again: answered from the queue, one effect.
	code, out, errOut = cli(t, ctx, `{"amount":1}`, args...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, `{"charge":1}`, out)
	require.EqualValues(t, 1, a.effects.Load())

	// A failed request prints the body and exits 3.
	code, out, _ = cli(t, ctx, "", "do", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer acct", "--data", "bad")
	require.Equal(t, exitFailed, code)
	require.Contains(t, out, "bad amount")
}

func TestCLI_UsageErrors(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"no queue":    {"ls"},
		"no url":      {"submit", "--queue", filepath.Join(dir, "q.db")},
		"bad header":  {"submit", "--queue", filepath.Join(dir, "q.db"), "--url", "http://127.0.0.1:1/", "-H", "nocolon"},
		"no id":       {"show", "--queue", filepath.Join(dir, "q.db")},
		"unknown cmd": {"frobnicate"},
		"bad flag":    {"ls", "--nope"},
	} {
		code, _, errOut := cli(t, ctx, "", args...)
		require.Equal(t, exitError, code, "%s: %s", name, errOut)
	}
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", filepath.Join(dir, "q.db"), "--url", "ftp://x/")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "invalid request")

	garbage := filepath.Join(dir, "garbage.db")
	require.NoError(t, os.WriteFile(garbage, bytes.Repeat([]byte("x"), 4096), 0o600))
	code, _, errOut = cli(t, ctx, "", "ls", "--queue", garbage)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "corrupt")
}

func TestCLI_RunStopsOnSignal(t *testing.T) {
	t.Parallel()
	// main cancels the context with the signal as its cause: SIGTERM stops
	// the service (0), SIGINT is a Ctrl-C (130).
	for _, tc := range []struct {
		cause error
		want  int
	}{{errSIGTERM, exitOK}, {errSIGINT, exitSIGINT}} {
		queue := filepath.Join(t.TempDir(), "q.db")
		ctx, cancel := context.WithCancelCause(testkit.Ctx(t))
		done := make(chan int, 1)
		go func() {
			code, _, _ := cli(t, ctx, "", "run", "--queue", queue)
			done <- code
		}()
		// run without --until-done keeps going while the queue is empty...
		select {
		case code := <-done:
			t.Fatalf("run exited early with %d", code)
		case <-time.After(200 * time.Millisecond):
		}
		cancel(tc.cause) // ...until SIGINT/SIGTERM
		require.Equal(t, tc.want, <-done, "%v", tc.cause)
	}
}

// TestCLI_Binary builds the command and drives it as scripts do, including
// SIGTERM.
func TestCLI_Binary(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skips building the binary")
	}
	a := newAPI(t)
	bin := filepath.Join(t.TempDir(), "idemkit")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	queue := filepath.Join(t.TempDir(), "q.db")

	out, err = exec.Command(bin, "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", `{"a":1}`).Output()
	require.NoError(t, err)
	require.Regexp(t, uuidLine, string(out))

	runCmd := exec.Command(bin, "run", "--queue", queue, "-H", "Authorization: Bearer acct")
	var stderr bytes.Buffer
	runCmd.Stderr = &stderr
	require.NoError(t, runCmd.Start())
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(bin, "ls", "--queue", queue, "--state", "succeeded", "--json").Output()
		require.NoError(t, err)
		if strings.Contains(string(out), `"state":"succeeded"`) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the intent never succeeded")
		timer := time.NewTimer(10 * time.Millisecond)
		<-timer.C
	}
	// Still running with nothing to do, until SIGTERM.
	require.Nil(t, runCmd.ProcessState)
	require.NoError(t, runCmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, runCmd.Wait(), stderr.String())

	require.EqualValues(t, 1, a.effects.Load())
}
