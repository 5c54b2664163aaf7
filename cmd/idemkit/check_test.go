package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/fakeprovider"
	"github.com/idemkit/idemkit/internal/conform"
	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// checkPayment is the request the check tests send: a payment the
// example accepts.
const checkPayment = `{"amount": 4000, "currency": "USD", "description": "idemkit check"}`

// checkArgs are a check command line against url, as alice with bob as the
// second caller.
func checkArgs(url string, extra ...string) []string {
	return append([]string{"check", "--url", url,
		"-H", "Authorization: Bearer alice", "-H", "Content-Type: application/json",
		"--data", checkPayment, "--as-other", "Authorization: Bearer bob"}, extra...)
}

// checkVerdicts runs check --json and returns the exit code, the verdicts
// and the report.
func checkVerdicts(t *testing.T, args ...string) (int, map[string]conform.Verdict, *conform.Report) {
	t.Helper()
	code, out, errOut := cli(t, testkit.Ctx(t), "", append(args, "--json")...)
	var rep conform.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout: %s\nstderr: %s", out, errOut)
	var text strings.Builder
	require.NoError(t, conform.WriteText(&text, &rep, false))
	t.Logf("exit %d, report:\n%s", code, text.String())
	return code, rep.Verdicts(), &rep
}

func everyPass() map[string]conform.Verdict {
	return map[string]conform.Verdict{
		conform.PropReplay: conform.Pass, conform.PropWindow: conform.Pass, conform.PropChangedBody: conform.Pass,
		conform.PropConcurrent: conform.Pass, conform.PropInFlight: conform.Pass, conform.PropScoped: conform.Pass,
		conform.PropHostileKeys: conform.Pass, conform.PropErrorStorage: conform.Pass,
	}
}

// startPayments serves the payments example's API (the handler
// examples/payments serves) on a test server.
func startPayments(t *testing.T, cfg paymentsapi.Config) *httptest.Server {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.SweepInterval = -1
	app, err := paymentsapi.Open(testkit.Ctx(t), &cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(func() {
		app.StopHandlers()
		srv.Close()
		app.Close()
	})
	return srv
}

// check passes the payments example on both stores and in both modes.
// The handler takes 300 ms so that the duplicates overlap it; on
// PostgreSQL in transactional mode a duplicate waits LockTimeout on the
// uncommitted claim before its 409, so the test shortens it to 100 ms
// (with the default 3 s, the duplicates wait for the commit and are
// replays: in-flight is then "cannot tell").
func TestCheck_PassesThePaymentsExample(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		dsn  func(t *testing.T) string // "" keeps everything in a SQLite file
		mode paymentsapi.Mode
	}{
		{"sqlite/transactional", nil, paymentsapi.ModeTransactional},
		{"sqlite/lease", nil, paymentsapi.ModeLease},
		{"postgres/transactional", func(t *testing.T) string { return testpg.SchemaDSN(t) }, paymentsapi.ModeTransactional},
		{"postgres/lease", func(t *testing.T) string { return testpg.SchemaDSN(t) }, paymentsapi.ModeLease},
		{"mysql/transactional", func(t *testing.T) string { return testmysql.URL(t) }, paymentsapi.ModeTransactional},
		{"mysql/lease", func(t *testing.T) string { return testmysql.URL(t) }, paymentsapi.ModeLease},
		// Redis holds the records only (lease mode); the ledger stays in the SQLite file.
		{"redis/lease", func(t *testing.T) string { return testdb.DSN(t, testdb.Redis) }, paymentsapi.ModeLease},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := paymentsapi.Config{Mode: tt.mode, Delay: 300 * time.Millisecond, LockTimeout: 100 * time.Millisecond}
			cfg.DB = filepath.Join(t.TempDir(), "payments.db")
			if tt.dsn != nil {
				cfg.DSN = tt.dsn(t)
			}
			srv := startPayments(t, cfg)
			code, verdicts, rep := checkVerdicts(t, checkArgs(srv.URL+"/v1/payments",
				"--error-data", `{"amount": -1, "currency": "USD"}`)...)
			// How many duplicates overlap the first one depends on
			// scheduling (and, on PostgreSQL, on the pool): in-flight may be
			// "cannot tell", never "fail".
			require.NotEqual(t, conform.Fail, verdicts[conform.PropInFlight])
			verdicts[conform.PropInFlight] = conform.Pass
			require.Equal(t, everyPass(), verdicts)
			require.Equal(t, exitOK, code)
			require.LessOrEqual(t, rep.Requests, conform.MaxRequestsDefault)
		})
	}
}

// countingServer counts the requests it gets and answers each with h.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestCheck_DryRunPrintsThePlanAndSendsNothing(t *testing.T) {
	t.Parallel()
	srv, n := countingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	code, out, errOut := cli(t, testkit.Ctx(t), "", checkArgs(srv.URL, "--dry-run")...)
	require.Equal(t, exitOK, code, errOut)
	require.Zero(t, n.Load())
	for _, want := range []string{"nothing is sent", "replay", "changed-body", "the first number, 4000, made 4001",
		"concurrent", "scoped", "hostile-keys", "at most 18 requests (--max-requests 30)"} {
		require.Contains(t, out, want)
	}
}

// The exit status says pass (0), fail (3) or cannot tell (4); the
// verdicts go to stdout, the summary to stderr.
func TestCheck_ExitStatus(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	good := fakeprovider.Start(t, "idemkit", &fakeprovider.Config{Delay: 200 * time.Millisecond})
	code, out, errOut := cli(t, ctx, "", checkArgs(good.URL)...)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "RESULT: pass")

	broken := fakeprovider.Start(t, "idemkit", &fakeprovider.Config{Delay: 200 * time.Millisecond, Broken: fakeprovider.NoFingerprint})
	code, out, errOut = cli(t, ctx, "", checkArgs(broken.URL)...)
	require.Equal(t, exitCheckFailed, code)
	require.Contains(t, out, "changed-body (fail)", "the evidence of the failed property")
	require.Contains(t, errOut, "RESULT: fail (changed-body)")

	refusing, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	code, _, errOut = cli(t, ctx, "", checkArgs(refusing.URL)...)
	require.Equal(t, exitCheckUndecided, code)
	require.Contains(t, errOut, "RESULT: cannot tell")

	code, _, errOut = cli(t, ctx, "", "check", "--data", "{}")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "--url is required")
	code, _, errOut = cli(t, ctx, "", checkArgs(good.URL, "--profile", "acme")...)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, `profile "acme"`)
	code, _, errOut = cli(t, ctx, "", checkArgs(good.URL, "-H", "Idempotency-Key: mine")...)
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "the battery sends its own keys")

	code, out, _ = cli(t, ctx, "", "check", "--help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, checkExitHelp)
	require.NotContains(t, out, "definitive failure: an intent ended failed", "not the queue commands' exit statuses")
}

// Without --as-other, scoping cannot be told and is not required: the
// run still passes.
func TestCheck_ScopingCannotBeToldWithoutASecondCaller(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.Start(t, "stripe", &fakeprovider.Config{Delay: 200 * time.Millisecond})
	code, verdicts, _ := checkVerdicts(t, "check", "--url", fake.URL, "--profile", "stripe",
		"-H", "Authorization: Bearer alice", "--data", checkPayment)
	require.Equal(t, exitOK, code)
	require.Equal(t, conform.CannotTell, verdicts[conform.PropScoped])
	require.Equal(t, conform.CannotTell, verdicts[conform.PropErrorStorage])
}

func TestCheck_JUnitReport(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.Start(t, "idemkit", &fakeprovider.Config{Delay: 500 * time.Millisecond, Broken: fakeprovider.NoRetryAfter})
	path := filepath.Join(t.TempDir(), "check.xml")
	code, _, _ := cli(t, testkit.Ctx(t), "", checkArgs(fake.URL, "--junit", path)...)
	require.Equal(t, exitCheckFailed, code)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Skipped  int `xml:"skipped,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(b, &suites), string(b))
	require.Len(t, suites.Suites, 1)
	s := suites.Suites[0]
	require.Equal(t, 8, s.Tests)
	require.Equal(t, 1, s.Failures)
	require.Equal(t, 1, s.Skipped, "error-storage: no --error-data")
	for _, c := range s.Cases {
		if c.Failure != nil {
			require.True(t, strings.HasPrefix(c.Name, "in-flight:"), c.Name)
			require.Contains(t, c.Failure.Message, "no Retry-After")
		}
	}
}

// A redirect is reported, never followed: the other host gets nothing.
func TestCheck_NeverContactsAHostNotGiven(t *testing.T) {
	t.Parallel()
	other, otherN := countingServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	srv, n := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/payments", http.StatusTemporaryRedirect)
	})
	code, verdicts, rep := checkVerdicts(t, checkArgs(srv.URL)...)
	require.Equal(t, exitCheckFailed, code, "307s to hostile keys are not 4xx")
	require.Zero(t, otherN.Load())
	// Every request reached srv (net/http itself answers the one whose key
	// has a control character, before the handler).
	require.InDelta(t, rep.Requests, n.Load(), 1)
	require.Equal(t, conform.CannotTell, verdicts[conform.PropReplay])
}

// --max-requests bounds what is sent; properties past it cannot be told.
func TestCheck_MaxRequestsBoundsTheBattery(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.Start(t, "idemkit", &fakeprovider.Config{Delay: 100 * time.Millisecond})
	code, verdicts, rep := checkVerdicts(t, checkArgs(fake.URL, "--max-requests", "6")...)
	require.Equal(t, exitCheckUndecided, code)
	require.Equal(t, 6, fake.Requests())
	require.Equal(t, 6, rep.Requests)
	require.Equal(t, conform.Pass, verdicts[conform.PropReplay])
	require.Equal(t, conform.Pass, verdicts[conform.PropChangedBody])
	require.Equal(t, conform.CannotTell, verdicts[conform.PropConcurrent])
	require.Equal(t, conform.CannotTell, verdicts[conform.PropHostileKeys])
}

// A real middleware misconfigured: every caller is the same principal.
// check fails scoping, and only scoping.
func TestCheck_CatchesAPrincipalFuncThatIgnoresTheCaller(t *testing.T) {
	t.Parallel()
	ctx := testkit.Ctx(t)
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "server.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	mw, err := server.New(st, &server.Config{PrincipalFunc: func(*http.Request) (string, error) { return "everyone", nil }})
	require.NoError(t, err)
	var n atomic.Int32
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond) // the handler's work, so that duplicates overlap it
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, n.Add(1))
	})))
	t.Cleanup(srv.Close)
	code, verdicts, _ := checkVerdicts(t, checkArgs(srv.URL+"/v1/payments")...)
	require.Equal(t, exitCheckFailed, code)
	want := everyPass()
	want[conform.PropScoped] = conform.Fail
	want[conform.PropErrorStorage] = conform.CannotTell
	require.Equal(t, want, verdicts)
}

// The binary against the payments example: it passes, and the ledger
// agrees with what the answers showed: one payment per accepted key
// (replay, changed body, concurrent and scoped for alice, scoped for bob),
// none for the hostile keys or the refused body.
func TestCheck_BinaryAgainstThePaymentsExampleMatchesItsLedger(t *testing.T) {
	t.Parallel()
	api := newPayAPI(t, 300*time.Millisecond)
	r := runBin(t, binEnv(t), "", checkArgs(api.URL+"/v1/payments", "--error-data", `{"amount": -1, "currency": "USD"}`)...)
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "RESULT: pass")
	require.Equal(t, 4, api.payments(t, "alice"))
	require.Equal(t, 1, api.payments(t, "bob"))
}

// TestCheck_HelpGolden: check's --help, its own exit statuses included
// (rewrite with -update, as TestHelp_Golden).
func TestCheck_HelpGolden(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, testkit.Ctx(t), "", "check", "--help")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "130  SIGINT")
	golden(t, "help-check", out)
}

// --json prints one object: the outcome, and each property with its
// evidence (keys, answers; never the credentials).
func TestCheck_JSONReport(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.Start(t, "idemkit", &fakeprovider.Config{Delay: 100 * time.Millisecond})
	code, out, errOut := cli(t, testkit.Ctx(t), "", checkArgs(fake.URL, "--json")...)
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, out, "Bearer", "credentials stay out of the report")
	var rep struct {
		Outcome  string `json:"outcome"`
		Requests int    `json:"requests"`
		Results  []struct {
			ID       string `json:"id"`
			Verdict  string `json:"verdict"`
			Evidence []struct {
				Key    string `json:"key"`
				Answer *struct {
					Status int `json:"status"`
				} `json:"answer"`
			} `json:"evidence"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, "pass", rep.Outcome)
	require.InDelta(t, rep.Requests, fake.Requests(), 1, "net/http answers the key with a control character itself")
	require.Len(t, rep.Results, 8)
	require.Equal(t, "replay", rep.Results[0].ID)
	require.Len(t, rep.Results[0].Evidence, 2)
	require.Equal(t, rep.Results[0].Evidence[0].Key, rep.Results[0].Evidence[1].Key, "a retry sends the same key")
	require.Equal(t, 201, rep.Results[0].Evidence[1].Answer.Status)
}
