package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReview_LsListsAroundDamagedRow: `ls` lists the good rows, reports the
// damaged one on stderr and exits non-zero.
func TestReview_LsListsAroundDamagedRow(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
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
	ctx := testCtx(t)
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

// TestReview_RunRefusesIdempotencyKeyHeader: -H on run is added to every
// request of every intent; an Idempotency-Key there would send all of them
// under one key (a 422, or another intent's replayed response).
func TestReview_RunRefusesIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx := testCtx(t)
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

// TestReview_RunUntilDoneStopsAtDamagedRow: a pending row that cannot be
// decoded is never sent (claims set it aside); `run --until-done` must not
// wait for it forever: it sends the others, reports it and exits non-zero.
func TestReview_RunUntilDoneStopsAtDamagedRow(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	ctx, cancel := context.WithTimeout(testCtx(t), 15*time.Second)
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
