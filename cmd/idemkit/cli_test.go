package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
)

// TestFind_IDPrefix: show and cancel take the short id (the last 8
// characters, as the CLI prints it), a unique id prefix, or a key; an
// ambiguous prefix or suffix lists the candidates.
func TestFind_IDPrefix(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	byFirst := map[byte][]string{}
	byLast := map[byte][]string{}
	var ids []string
	// 17 uuids: two share their first hex digit (UUIDv7: all of them, the
	// time comes first) and two their last.
	for i := range 17 {
		code, out, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", "http://127.0.0.1:1/x", "--key", "key-"+string(rune('a'+i)))
		require.Equal(t, 0, code, errOut)
		id := strings.TrimSpace(out)
		ids = append(ids, id)
		byFirst[id[0]] = append(byFirst[id[0]], id)
		byLast[id[len(id)-1]] = append(byLast[id[len(id)-1]], id)
	}
	for _, id := range ids {
		require.Equal(t, 1, strings.Count(strings.Join(ids, " "), shortID(id)), "short id %s is unique", shortID(id))
	}
	code, out, errOut := cli(t, ctx, "", "show", "--queue", queue, shortID(ids[0]))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ID:          "+ids[0])
	code, out, errOut = cli(t, ctx, "", "show", "--queue", queue, ids[3][:len(ids[3])-4])
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ID:          "+ids[3], "a unique prefix finds its intent")
	code, out, errOut = cli(t, ctx, "", "show", "--queue", queue, "key-b")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ID:          "+ids[1], "a key finds its intent")

	for _, by := range []map[byte][]string{byFirst, byLast} {
		for c, same := range by {
			if len(same) < 2 {
				continue
			}
			code, _, errOut = cli(t, ctx, "", "cancel", "--queue", queue, string(c))
			require.Equal(t, exitError, code)
			require.Contains(t, errOut, "is ambiguous")
			slices.Sort(same)
			require.Contains(t, errOut, same[0])
			break
		}
	}

	code, out, errOut = cli(t, ctx, "", "cancel", "--queue", queue, shortID(ids[2]))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "canceled, attempts=0")
	code, _, errOut = cli(t, ctx, "", "show", "--queue", queue, "zzzz")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "not found")
}

// TestLs_StateValidated: --state lists its values in help and refuses
// others in words.
func TestLs_StateValidated(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", "http://127.0.0.1:1/x")
	require.Equal(t, 0, code, errOut)
	code, out, errOut := cli(t, ctx, "", "ls", "--queue", queue, "--state", "done")
	require.Equal(t, exitError, code)
	require.Empty(t, out)
	require.Equal(t, `idemkit: --state "done": want one of pending, succeeded, failed, unknown, expired, canceled`+"\n", errOut)
	code, out, _ = cli(t, ctx, "", "ls", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "pending, succeeded, failed, unknown, expired, canceled")
}

// TestFailed_StatusNotRepeated: a failed intent says its status once, not
// "status 400, last error: status 400".
func TestFailed_StatusNotRepeated(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer x", "--data", "bad", "--key", "k")
	require.Equal(t, exitFailed, code)
	require.Equal(t, 1, strings.Count(errOut, "400"), errOut)
	code, out, _ := cli(t, ctx, "", "show", "--queue", queue, "k")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "Last error")
	require.Equal(t, 1, strings.Count(out, "Status:      400 Bad Request"))
}

// TestRetry_RequeuesFailedUnderNewKey: retry needs a confirmation, queues
// the failed request under a new key derived from the old one (so a second
// retry queues nothing), and refuses intents that are not failed.
func TestRetry_RequeuesFailedUnderNewKey(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	// No credential: the API refuses it (the principal is the token).
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", `{"amount":1}`, "--key", "k1")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "give them with -H")

	code, out, errOut := cli(t, ctx, "no\n", "retry", "--queue", queue, "k1")
	require.Equal(t, exitError, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "not confirmed")

	code, out, errOut = cli(t, ctx, "yes\n", "retry", "--queue", queue, "k1", "--json")
	require.Equal(t, 0, code, errOut)
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &j))
	require.Equal(t, "k1~retry1", j["key"])
	require.Equal(t, "pending", j["state"])
	require.Contains(t, errOut, "idemkit run --queue")

	code, _, errOut = cli(t, ctx, "", "retry", "--queue", queue, "k1", "--yes")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "already retried as")
	code, out, _ = cli(t, ctx, "", "show", "--queue", queue, "k1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Retried as:  "+j["id"].(string)+" (key k1~retry1, pending)")

	code, out, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer acct")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "succeeded 201 Created")
	require.EqualValues(t, 1, a.effects.Load())

	code, _, errOut = cli(t, ctx, "", "retry", "--queue", queue, "k1~retry1", "--yes")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "it is succeeded; only failed intents can be retried")
}

// TestRetry_RefusesExpired: the outcome of an expired intent is unknown; it
// is never resent under a new key.
func TestRetry_RefusesExpired(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", "http://127.0.0.1:1/x", "--window", "1s", "--key", "gone")
	require.Equal(t, exitExpired, code, errOut)
	code, _, errOut = cli(t, ctx, "", "retry", "--queue", queue, "gone", "--yes")
	require.Equal(t, exitExpired, code)
	require.Contains(t, errOut, "outcome is unknown")
	code, out, _ := cli(t, ctx, "", "ls", "--queue", queue, "--json")
	require.Equal(t, 0, code)
	require.Equal(t, 1, strings.Count(out, "\n"), "nothing queued")
}

func TestRetryKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"k", "k~retry1"},
		{"k~retry1", "k~retry2"},
		{"k~retry9", "k~retry10"},
		{"k~retryx", "k~retryx~retry1"},
		{strings.Repeat("a", 255), "3d0b4e4a8e3ae4e1a4a5ef5a5e1d8a5b~retry1"},
	} {
		got := retryKey(tc.in)
		if len(tc.in) == 255 {
			require.Len(t, got, 32+len("~retry1"))
			require.True(t, strings.HasSuffix(got, "~retry1"))
			continue
		}
		require.Equal(t, tc.want, got)
	}
}

// TestStopped_ShowsTheAttemptError: an intent stopped by --timeout reports
// the error its attempts got ("connection refused"), not "context
// deadline exceeded".
func TestStopped_ShowsTheAttemptError(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", deadURL(t), "--key", "k", "--timeout", "2s")
	require.Equal(t, exitInterrupted, code, errOut)
	require.Regexp(t, `pending, attempts=\d+, next_attempt_at=\S+, last_error="[^"]*connection refused"`, errOut)
	code, out, errOut := cli(t, ctx, "", "show", "--queue", queue, "k")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `Last error:  .*connection refused\n`, out, "the stored last error is the attempts' own")
}

// TestRun_MaxAttemptsPerRun: --max-attempts bounds the attempts of this
// run, whatever earlier runs made; the intents stay pending (exit 2).
func TestRun_MaxAttemptsPerRun(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	dead := deadURL(t)
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", dead, "--key", "old", "--max-attempts", "3")
	require.Equal(t, exitInterrupted, code, errOut)
	code, _, errOut = cli(t, ctx, "", "submit", "--queue", queue, "--url", dead, "--key", "new")
	require.Equal(t, 0, code, errOut)

	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "--max-attempts", "2", "-v")
	require.Equal(t, exitInterrupted, code, errOut)
	require.Contains(t, errOut, "--max-attempts 2 reached with 2 intent(s) pending")
	require.Contains(t, errOut, "idemkit run --queue")
	require.Regexp(t, `attempt 1: http://127\.0\.0\.1:\d+/v1/payments\n`, errOut, "-v shows every attempt")
	require.Regexp(t, `attempt 1: .*connection refused; (retrying in|next attempt at)`, errOut, "-v shows why it is retried")
	for key, before := range map[string]int{"old": 3, "new": 0} {
		code, out, errOut := cli(t, ctx, "", "show", "--queue", queue, key, "--json")
		require.Equal(t, 0, code, errOut)
		var j struct {
			State      string `json:"state"`
			AttemptLog []struct {
				Error string `json:"error"`
			} `json:"attempt_log"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &j))
		require.Equal(t, "pending", j.State)
		sent := 0
		for _, a := range j.AttemptLog[before:] {
			// An attempt refused at the bound (logged, never sent) is not one.
			if !strings.Contains(a.Error, "--max-attempts 2 reached") {
				sent++
			}
		}
		require.Equal(t, 2, sent, "%s: attempts sent in this run", key)
	}
}

// TestProgress_InPlaceOnTerminal: on a terminal the counts line is redrawn
// in place and other lines are printed above it; elsewhere each change is
// a plain line.
func TestProgress_InPlaceOnTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tty  bool
		want string
	}{
		{true, "\r\x1b[Kidemkit: 1 pending\r\x1b[Kattempt 1\nidemkit: 1 pending\r\x1b[Kidemkit: 0 pending\n"},
		{false, "idemkit: 1 pending\nattempt 1\nidemkit: 0 pending\n"},
	} {
		var b strings.Builder
		p := newProgress(&b, tc.tty)
		p.update("1 pending")
		p.update("1 pending")
		_, _ = p.Write([]byte("attempt 1\n"))
		p.update("0 pending")
		p.finish()
		p.update("ignored after finish")
		require.Equal(t, tc.want, b.String(), "tty=%v", tc.tty)
	}
}

// TestRun_HeadersGoToOneHost: run -H sends the credential to one host
// only: --host, or the only host of the pending intents; with several it
// refuses to guess.
func TestRun_HeadersGoToOneHost(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	a, b := newAPI(t), newAPI(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	for _, u := range []string{a.URL, b.URL} {
		code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", u+"/charges", "--data", `{"amount":1}`)
		require.Equal(t, 0, code, errOut)
	}
	code, _, errOut := cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer tok_a")
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, "give --host")
	require.Empty(t, a.seen(), "nothing sent")
	require.Empty(t, b.seen(), "nothing sent")

	code, out, errOut := cli(t, ctx, "", "run", "--queue", queue, "--until-done", "--host", a.URL, "-H", "Authorization: Bearer tok_a")
	require.Equal(t, exitFailed, code, "b's intent has no credential: %s", errOut)
	require.Contains(t, out, "succeeded 201 Created")
	require.Contains(t, errOut, "-H not sent to "+b.URL)
	require.Equal(t, []string{"Bearer tok_a"}, a.seen())
	require.Equal(t, []string{""}, b.seen(), "the token never went to the other host")

	// One host pending: inferred, and said.
	queue2 := filepath.Join(t.TempDir(), "q2.db")
	code, _, errOut = cli(t, ctx, "", "submit", "--queue", queue2, "--url", b.URL+"/charges", "--data", `{"amount":2}`)
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue2, "--until-done", "-H", "Authorization: Bearer tok_b")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "-H applies to "+b.URL)
	require.Equal(t, []string{"", "Bearer tok_b"}, b.seen())
}

// TestRun_TimeoutLeavesWorkQueued: --timeout ends run; with intents still
// pending it exits 2 with the command that resumes, else 0.
func TestRun_TimeoutLeavesWorkQueued(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	empty := filepath.Join(t.TempDir(), "empty.db")
	code, _, errOut := cli(t, ctx, "", "run", "--queue", empty, "--timeout", "300ms")
	require.Equal(t, 0, code, "nothing pending: %s", errOut)

	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut = cli(t, ctx, "", "submit", "--queue", queue, "--url", deadURL(t))
	require.Equal(t, 0, code, errOut)
	for _, args := range [][]string{{"run", "--timeout", "300ms"}, {"run", "--until-done", "--timeout", "300ms"}} {
		code, _, errOut = cli(t, ctx, "", append(args, "--queue", queue)...)
		require.Equal(t, exitInterrupted, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "--timeout 300ms reached with 1 intent(s) pending", "%v", args)
		require.Contains(t, errOut, "idemkit run --queue "+queue+" --until-done", "%v", args)
	}
}

// TestDo_BodyOnTerminalEndsLine: on a terminal the body gets a final
// newline, so the summary line on stderr starts a line of its own; a pipe
// gets the body byte for byte.
func TestDo_BodyOnTerminalEndsLine(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	for _, tty := range []bool{false, true} {
		var out, errb strings.Builder
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, stdoutTTY: tty}
		code := e.run(ctx, []string{"do", "--queue", filepath.Join(t.TempDir(), "q.db"), "--url", a.URL + "/charges", "-H", "Authorization: Bearer x", "--data", "{}"})
		require.Equal(t, 0, code, errb.String())
		require.Regexp(t, `^\{"charge":\d+\}$`, strings.TrimSuffix(out.String(), "\n"))
		require.Equal(t, tty, strings.HasSuffix(out.String(), "\n"), "tty=%v: %q", tty, out.String())
	}
}

// TestPrune_StateKeepsReceipts: prune --state failed deletes the failed
// intents and keeps the succeeded ones; --state pending is refused.
func TestPrune_StateKeepsReceipts(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer x", "--data", "bad", "--key", "bad")
	require.Equal(t, exitFailed, code, errOut)
	code, _, errOut = cli(t, ctx, "", "do", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer x", "--data", "ok", "--key", "ok")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "prune", "--queue", queue, "--older-than", "0s", "--state", "pending")
	require.Equal(t, exitError, code, errOut)
	code, out, errOut := cli(t, ctx, "", "prune", "--queue", queue, "--older-than", "0s", "--state", "failed")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "1\n", out)
	code, _, _ = cli(t, ctx, "", "show", "--queue", queue, "ok")
	require.Equal(t, 0, code, "the receipt is kept")
	code, _, _ = cli(t, ctx, "", "show", "--queue", queue, "bad")
	require.NotEqual(t, 0, code, "the failed intent is gone")
}

// TestRun_WarnsOfMissingCredentials: run without -H for an intent queued
// with an Authorization header says so before sending; with -H it does
// not.
func TestRun_WarnsOfMissingCredentials(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer x", "--data", "ok", "--key", "k")
	require.Equal(t, 0, code, errOut)
	code, out, errOut := cli(t, ctx, "", "show", "--queue", queue, "k")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "Authorization: (not stored: give it with -H when resuming)")
	code, out, errOut = cli(t, ctx, "", "show", "--queue", queue, "k", "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"credential_headers":["Authorization"]`)
	require.NotContains(t, out, "Bearer x")
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done")
	require.Equal(t, exitFailed, code, errOut)
	require.Regexp(t, `idemkit: \w+ was queued with Authorization, which this run does not send \(never stored\): give -H "Authorization: \$IDEMKIT_AUTHORIZATION"`, errOut)
	require.Less(t, strings.Index(errOut, "was queued with Authorization"), strings.Index(errOut, "401"), "said before the answer")

	code, _, errOut = cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer x", "--data", "ok", "--key", "k2")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer x")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "was queued with")
}

// TestDo_ProfileChoosesTheDialect: --profile NAME sends every host the
// profile's key header; --profile HOST=NAME only that host; an unknown
// name is a usage error listing the known ones.
func TestDo_ProfileChoosesTheDialect(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	host := strings.TrimPrefix(srv.URL, "http://")

	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", srv.URL, "--key", "k1", "--profile", "checkout")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "k1", (<-got).Get("Cko-Idempotency-Key"))

	code, _, errOut = cli(t, ctx, "", "do", "--queue", queue, "--url", srv.URL, "--key", "k2", "--profile", host+"=paypal")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "k2", (<-got).Get("PayPal-Request-Id"))

	code, _, errOut = cli(t, ctx, "", "do", "--queue", queue, "--url", srv.URL, "--key", "k3", "--profile", "nope")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, `unknown profile "nope": want one of idemkit, ietf, stripe, stripe-v2, adyen, checkout, paypal`)
}

// TestRun_ResumeHintNamesQueuedCredentials: a run stopped with work left
// prints a resume command that asks for the credential headers the
// pending intents were queued with, even when this run was given none.
func TestRun_ResumeHintNamesQueuedCredentials(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", deadURL(t), "-H", "X-Api-Key: k", "--key", "k")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "--timeout", "300ms")
	require.Equal(t, exitInterrupted, code, errOut)
	require.Regexp(t, `idemkit run --queue \S+ --until-done .*-H "X-Api-Key: \$IDEMKIT_X_API_KEY"`, errOut)
}

// TestRetry_HintNamesTheOriginalCredentials: the command retry prints asks
// for the credential headers the failed intent was queued with.
func TestRetry_HintNamesTheOriginalCredentials(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", a.URL+"/charges", "-H", "Authorization: Bearer x", "--data", "bad", "--key", "k")
	require.Equal(t, exitFailed, code, errOut)
	code, _, errOut = cli(t, ctx, "", "retry", "--queue", queue, "k", "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "idemkit run --queue "+queue+" --until-done --host "+a.URL+` -H "Authorization: $IDEMKIT_AUTHORIZATION"`)
	require.NotContains(t, errOut, "Bearer x")
}

// TestDo_ResumeHintNamesEveryCredentialHeader: the hint of an interrupted
// do asks for every credential header the intent was queued with, not
// only Authorization.
func TestDo_ResumeHintNamesEveryCredentialHeader(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "do", "--queue", queue, "--url", deadURL(t), "-H", "X-Api-Key: k_s3cr3t", "--max-attempts", "1")
	require.Equal(t, exitInterrupted, code, errOut)
	require.Regexp(t, `idemkit run --queue \S+ --until-done --host \S+ -H "X-Api-Key: \$IDEMKIT_X_API_KEY"`, errOut)
	require.NotContains(t, errOut, "k_s3cr3t")
	code, _, errOut = cli(t, ctx, "", "submit", "--queue", queue, "--url", deadURL(t), "-H", "X-Api-Key: k_s3cr3t")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "X-Api-Key not stored in the queue")
}

// TestLs_ListsAroundDamagedRow: `ls` lists the good rows, reports the
// damaged one on stderr and exits non-zero.
func TestLs_ListsAroundDamagedRow(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	var ids []string
	for _, u := range []string{"/a", "/bad", "/b"} {
		code, out, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", "http://127.0.0.1:1"+u)
		require.Equal(t, 0, code, errOut)
		ids = append(ids, strings.TrimSpace(out))
	}
	db, err := sql.Open("sqlite", queue+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE idemkit_intents SET header = X'7B7B' WHERE id = ?`, ids[1])
	require.NoError(t, err)

	code, out, errOut := cli(t, ctx, "", "ls", "--queue", queue, "--json")
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, ids[1], "the damaged row is reported")
	require.Contains(t, errOut, "corrupt")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), "ls line %q", l)
		got = append(got, m["id"].(string))
	}
	require.ElementsMatch(t, []string{ids[0], ids[2]}, got, "the good rows are listed")

	code, out, errOut = cli(t, ctx, "", "ls", "--queue", queue)
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, out, ids[0])
	require.Contains(t, out, ids[2])
	require.Contains(t, errOut, ids[1])
}

// TestRunUntilDone_JudgesOnlyThisRunsIntents: an old failed intent does
// not make every later `run --until-done` exit 3; --all judges the whole
// queue.
func TestRunUntilDone_JudgesOnlyThisRunsIntents(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", `{"amount":"bad"}`)
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer acct")
	require.Equal(t, exitFailed, code, errOut)

	code, _, errOut = cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", `{"amount":1}`)
	require.Equal(t, 0, code, errOut)
	code, out, errOut := cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer acct")
	require.Equal(t, exitOK, code, "the old failed intent is not this run's: %s", errOut)
	require.Contains(t, out, "succeeded 201 Created, replayed=false, attempts=1")
	require.EqualValues(t, 1, a.effects.Load())

	code, _, errOut = cli(t, ctx, "", "run", "--queue", queue, "--until-done", "--all")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "1 of the queue's intents ended failed or canceled")
	require.Contains(t, errOut, "failed 400 Bad Request")
}

// TestRun_RefusesIdempotencyKeyHeader: -H on run is added to every
// request of every intent; an Idempotency-Key there would send all of them
// under one key (a 422, or another intent's replayed response).
func TestRun_RefusesIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testkit.Ctx(t)
	queue := filepath.Join(t.TempDir(), "q.db")
	for _, body := range []string{`{"amount":1}`, `{"amount":2}`} {
		code, _, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", body)
		require.Equal(t, 0, code, errOut)
	}
	code, _, errOut := cli(t, ctx, "", "run", "--queue", queue, "--until-done",
		"-H", "Authorization: Bearer acct", "-H", "Idempotency-Key: same-for-all")
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, "Idempotency-Key")
	require.EqualValues(t, 0, a.effects.Load(), "nothing sent")
}

// TestRunUntilDone_StopsAtDamagedRow: a pending row that cannot be
// decoded is never sent (claims set it aside); `run --until-done` must not
// wait for it forever: it sends the others, reports it and exits non-zero.
func TestRunUntilDone_StopsAtDamagedRow(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx, cancel := context.WithTimeout(testkit.Ctx(t), 15*time.Second)
	defer cancel()
	queue := filepath.Join(t.TempDir(), "q.db")
	var ids []string
	for _, body := range []string{`{"amount":1}`, `{"amount":2}`, `{"amount":3}`} {
		code, out, errOut := cli(t, ctx, "", "submit", "--queue", queue, "--url", a.URL+"/charges", "--data", body)
		require.Equal(t, 0, code, errOut)
		ids = append(ids, strings.TrimSpace(out))
	}
	db, err := sql.Open("sqlite", queue+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`UPDATE idemkit_intents SET header = X'7B7B' WHERE id = ?`, ids[1])
	require.NoError(t, err)

	code, _, errOut := cli(t, ctx, "", "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer acct")
	require.NotContains(t, errOut, "interrupted", "run waited for the damaged row")
	require.Equal(t, exitError, code, errOut)
	require.Contains(t, errOut, ids[1])
	require.EqualValues(t, 2, a.effects.Load(), "the good intents are sent")
}
