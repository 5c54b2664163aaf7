package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
)

// lossyFront is the payments example API behind a gateway that loses
// POST answers: the first POST reaches the API (committed) or not
// (dropBefore) and its answer never arrives; every later POST is refused
// by the gateway with 401, as a credential that expired meanwhile. GETs
// (the key status lookup) pass through.
type lossyFront struct {
	*httptest.Server
	api   *payAPI
	posts atomic.Int32
}

func newLossyFront(t *testing.T, dropBefore bool) *lossyFront {
	t.Helper()
	f := &lossyFront{api: newPayAPI(t, 0)}
	h := f.api.app.Handler()
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		if f.posts.Add(1) > 1 {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, "gateway: token expired")
			return
		}
		if dropBefore {
			_, _ = io.Copy(io.Discard, r.Body)
		} else {
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// TestReconcile_BinaryTurnsLostAnswerIntoSucceeded: `idemkit do` loses
// the answer of a payment the server made, and the retry is refused: exit
// 4, the intent is unknown. `idemkit reconcile --json` with the
// credential asks the payments API's lookup and records the original
// response: the intent succeeded, replayed, with the payment's receipt;
// exit 0; exactly one payment.
func TestReconcile_BinaryTurnsLostAnswerIntoSucceeded(t *testing.T) {
	t.Parallel()
	f := newLossyFront(t, false)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := binEnv(t)

	r := runBin(t, vars, "", "do", "--queue", queue, "--url", f.URL+"/v1/payments",
		"-H", "Content-Type: application/json", "-H", "Authorization: Bearer alice", "--data", usd40)
	require.Equal(t, exitExpired, r.code, "the outcome is unknown: %s", r.stderr)

	r = runBin(t, vars, "", "reconcile", "--queue", queue, "--json", "-H", "Authorization: Bearer alice")
	require.Equal(t, exitOK, r.code, "stderr: %s\nstdout: %s", r.stderr, r.stdout)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 1, r.stdout)
	var got struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Was      string `json:"was"`
		Server   string `json:"server"`
		Status   int    `json:"status"`
		Replayed bool   `json:"replayed"`
		Note     string `json:"note"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &got))
	require.Equal(t, "succeeded", got.State)
	require.Equal(t, "unknown", got.Was)
	require.Equal(t, "completed", got.Server)
	require.Equal(t, http.StatusCreated, got.Status)
	require.True(t, got.Replayed)
	require.NotContains(t, r.stdout+r.stderr, "Bearer alice", "the credential is never printed")

	payments, err := f.api.app.Payments(testkit.Ctx(t), "alice")
	require.NoError(t, err)
	require.Len(t, payments, 1, "exactly one payment")
	r = runBin(t, vars, "", "show", "--queue", queue, "--json", got.ID)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, payments[0].ID, "the outcome is the original's receipt")
	require.NotContains(t, r.stdout, "Bearer alice", "the credential was never stored")

	// Nothing left: exit 0, said on stderr.
	r = runBin(t, vars, "", "reconcile", "--queue", queue)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stderr, "nothing to reconcile")
}

// TestReconcileCmd_NoRecordExits4: the lost request never reached the
// API: the lookup has no record, the intent stays unknown, exit 4, and the
// line says that resending under the same key is safe.
func TestReconcileCmd_NoRecordExits4(t *testing.T) {
	t.Parallel()
	f := newLossyFront(t, true)
	queue := filepath.Join(t.TempDir(), "q.db")
	ctx := testkit.Ctx(t)
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", f.URL+"/v1/payments",
		"-H", "Content-Type: application/json", "-H", "Authorization: Bearer alice", "--data", usd40)
	require.Equal(t, exitExpired, code, errOut)

	code, out, errOut := cli(t, ctx, "", "reconcile", "--queue", queue, "-H", "Authorization: Bearer alice")
	require.Equal(t, exitExpired, code, errOut)
	require.Contains(t, out, "unknown -> unknown")
	require.Contains(t, out, "server: unknown")
	require.Contains(t, out, "safe")
	require.Zero(t, f.api.payments(t, "alice"))

	// Without the credential the lookup is refused: still unknown, exit 4.
	code, out, errOut = cli(t, ctx, "", "reconcile", "--queue", queue)
	require.Equal(t, exitExpired, code, errOut)
	require.Contains(t, out, "not asked")
	require.Contains(t, out, "401")
}

// TestReconcileCmd_Usage: usage and local errors exit 1.
func TestReconcileCmd_Usage(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	dir := t.TempDir()
	code, _, errOut := cli(t, ctx, "", "reconcile", "--queue", filepath.Join(dir, "none.db"))
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "no queue")

	code, _, errOut = cli(t, ctx, "", "reconcile", "--queue", filepath.Join(dir, "none.db"), "--path", "/keys")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "--path")

	code, _, errOut = cli(t, ctx, "", "reconcile", "--queue", filepath.Join(dir, "none.db"), "-H", "Idempotency-Key: x")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "Idempotency-Key")
}

// TestReconcileCmd_HelpGolden: reconcile's --help, its exit statuses
// included.
func TestReconcileCmd_HelpGolden(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, testkit.Ctx(t), "", "reconcile", "--help")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "130  SIGINT")
	golden(t, "help-reconcile", out)
}
