// Package testdb reads the test databases' addresses from the environment and
// counts the tests that skipped for want of one.
//
// A test that needs PostgreSQL, MariaDB/MySQL or Redis calls DSN with the
// variable that names it. When the variable is unset the test skips with a
// message that says how to run it, except under CI=true, where a missing
// database is a failure: a skipped test proves nothing.
//
// go test ./... prints only "ok" for a passing package, so a package's
// TestMain wraps its *testing.M with Report: after the run it writes one line
// per package with the number of tests skipped for want of a database and
// the command that runs them, to the terminal (/dev/tty) when there is one
// and to standard error otherwise (shown with -v).
package testdb

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The environment variables naming the test databases.
const (
	Postgres = "IDEM_TEST_POSTGRES"
	MySQL    = "IDEM_TEST_MYSQL"
	Redis    = "IDEM_TEST_REDIS"
)

// examples are the values that work on this project's machines.
var examples = map[string]string{
	Postgres: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	MySQL:    "root@tcp(127.0.0.1:3306)/test",
	Redis:    "redis://127.0.0.1:6379/0",
}

// Example returns a value of env that works on this project's machines.
func Example(env string) string { return examples[env] }

var (
	mu      sync.Mutex
	skipped = map[string]int{}
)

// DSN returns the value of env. When it is unset, DSN fails the test under
// CI=true and skips it otherwise, counting the skip for Report.
func DSN(t testing.TB, env string) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn != "" {
		return dsn
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is unset under CI=true: database tests must run in CI", env)
	}
	mu.Lock()
	skipped[env]++
	mu.Unlock()
	t.Skipf("%s is unset: skipping (run with %s=%q)", env, env, examples[env])
	return ""
}

// TestingM is what goleak.VerifyTestMain and Report take: a *testing.M.
type TestingM interface{ Run() int }

type reporter struct{ m TestingM }

// Report wraps m so that its Run reports the tests skipped for want of a
// database once they have run.
func Report(m TestingM) TestingM { return reporter{m} }

func (r reporter) Run() int {
	code := r.m.Run()
	if line := summary(); line != "" {
		var w io.Writer = os.Stderr
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			w = tty
		}
		fmt.Fprintln(w, line)
	}
	return code
}

// summary is the line Report prints, or "" when nothing was skipped.
func summary() string {
	mu.Lock()
	defer mu.Unlock()
	if len(skipped) == 0 {
		return ""
	}
	envs := make([]string, 0, len(skipped))
	n := 0
	for env, k := range skipped {
		envs = append(envs, env)
		n += k
	}
	sort.Strings(envs)
	var set []string
	for _, env := range envs {
		set = append(set, fmt.Sprintf("%s=%q", env, examples[env]))
	}
	pkg := ""
	if len(os.Args) > 0 {
		pkg = strings.TrimSuffix(strings.TrimSuffix(baseName(os.Args[0]), ".test"), ".exe")
	}
	return fmt.Sprintf("%s: %d test(s) skipped for want of a database (%s unset); run them with: %s go test ./...",
		pkg, n, strings.Join(envs, ", "), strings.Join(set, " "))
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}
