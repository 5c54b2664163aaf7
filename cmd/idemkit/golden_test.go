package main

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files")

// golden compares got with testdata/name.golden (or rewrites it with
// -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/idemkit -run %s -update", t.Name())
	require.Equal(t, string(want), got, "%s changed: if on purpose, run go test ./cmd/idemkit -run %s -update", path, t.Name())
}

// TestHelp_Golden: the --help of every command, exit statuses included.
func TestHelp_Golden(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	for _, name := range []string{"", "do", "submit", "run", "ls", "show", "cancel", "retry", "prune"} {
		args := []string{"--help"}
		if name != "" {
			args = []string{name, "--help"}
		}
		code, out, errOut := cli(t, ctx, "", args...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "130  SIGINT")
		file := "help-" + name
		if name == "" {
			file = "help"
		}
		golden(t, file, out)
	}
}

var (
	uuidRe = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRe = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
	portRe = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	dateRe = regexp.MustCompile(`"Date":\["[^"]*"\]`)
)

// normalize replaces what changes from run to run.
func normalize(s string) string {
	s = uuidRe.ReplaceAllString(s, "<uuid>")
	s = timeRe.ReplaceAllString(s, "<time>")
	s = portRe.ReplaceAllString(s, "127.0.0.1:PORT")
	return dateRe.ReplaceAllString(s, `"Date":["<date>"]`)
}

// TestJSON_Golden: the --json output of every command on a fixed server.
func TestJSON_Golden(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Idempotency-Key"), "fail") {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid amount"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1","amount":4000}`)
	}))
	t.Cleanup(srv.Close)
	queue := filepath.Join(t.TempDir(), "q.db")
	vars := map[string]string{queueEnv: queue}
	var all strings.Builder
	step := func(stdin string, want int, args ...string) {
		t.Helper()
		code, out, errOut := cliEnv(t, ctx, vars, stdin, append(args, "--json")...)
		require.Equal(t, want, code, "%v: %s", args, errOut)
		fmt.Fprintf(&all, "$ idemkit %s --json\n%s", strings.Join(args, " "), out)
	}
	step("", 0, "do", "--url", srv.URL+"/v1/payments", "--key", "k-do", "-H", "Content-Type: application/json", "--data", `{"amount":4000}`)
	step("", exitFailed, "do", "--url", srv.URL+"/v1/payments", "--key", "k-fail", "--data", `{"amount":-1}`)
	step("", 0, "submit", "--url", srv.URL+"/v1/payments", "--key", "k-submit", "--data", `{"amount":1}`)
	step("", 0, "submit", "--url", srv.URL+"/v1/payments", "--key", "k-cancel", "--data", `{"amount":2}`)
	step("", 0, "cancel", "k-cancel")
	step("", 0, "run", "--until-done")
	step("", 0, "ls", "--state", "succeeded")
	step("", 0, "show", "k-fail")
	step("yes\n", 0, "retry", "k-fail")
	step("", 0, "prune", "--older-than", "0s")
	golden(t, "json", normalize(all.String()))
}
