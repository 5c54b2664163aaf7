package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
)

// shortConfig is the CI run: every scenario, tiny cells. Numbers are not
// judged, only the checks and the report's shape.
func shortConfig(t *testing.T) config {
	return config{
		Out:        filepath.Join(t.TempDir(), "bench.json"),
		Rounds:     1,
		Duration:   300 * time.Millisecond,
		MaxOps:     3000,
		MinOps:     10, // every cell does something, however loaded the machine
		Clients:    []int{1, 3},
		Pool:       4,
		SweepRows:  2000,
		SweepCalls: 2,
		Dir:        t.TempDir(),
		ReplayPool: 256,
	}
}

// readReport parses the JSON file the run wrote, refusing unknown fields.
func readReport(t *testing.T, path string) *report {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var r report
	require.NoError(t, dec.Decode(&r))
	require.Equal(t, reportVersion, r.Version)
	require.NotZero(t, r.Machine.NProc)
	require.NotEmpty(t, r.Checks)
	return &r
}

// requireCells checks that the report has exactly one cell and one summary
// row for every mode at every client count, the baseline at ratio 1.
func requireCells(t *testing.T, r *report, section, scenario string, modes []string, clients []int) {
	t.Helper()
	for _, m := range modes {
		for _, c := range clients {
			var cells []cell
			for _, x := range r.Cells {
				if x.Section == section && x.Scenario == scenario && x.Mode == m && x.Clients == c {
					cells = append(cells, x)
				}
			}
			require.Len(t, cells, 1, "%s %s %s at %d clients", section, scenario, m, c)
			x := cells[0]
			require.Positive(t, x.Ops, "%s %s %s at %d clients completed nothing", section, scenario, m, c)
			require.Zero(t, x.Errors)
			require.Positive(t, x.OpsPerSec)
			require.LessOrEqual(t, x.P50Micros, x.P99Micros)
			if m == baselineOf[section] {
				require.InDelta(t, 1.0, x.Ratio, 1e-9)
			} else if _, ok := baselineOf[section]; ok {
				require.Positive(t, x.Ratio)
			}
			if m == referenceOf[section] {
				require.InDelta(t, 1.0, x.RatioReference, 1e-9)
			} else if _, ok := referenceOf[section]; ok {
				require.Positive(t, x.RatioReference)
			} else {
				require.Zero(t, x.RatioReference)
			}
			n := 0
			for _, s := range r.Summary {
				if s.Section == section && s.Scenario == scenario && s.Mode == m && s.Clients == c {
					n++
				}
			}
			require.Equal(t, 1, n, "summary rows of %s %s %s at %d clients", section, scenario, m, c)
		}
	}
}

func TestShortRun_ServerAndSweepPassEveryCheck(t *testing.T) {
	// Not parallel: handler allocations are the process's mallocs minus
	// the noop route's, and a test running beside it allocates into both
	// (CI read -125 allocations per request with it parallel).
	cfg := shortConfig(t)
	cfg.DSN = testpg.BaseDSN(t)
	cfg.Server, cfg.Sweep = true, true
	var table strings.Builder
	_, err := run(context.Background(), cfg, &table, io.Discard)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	requireCells(t, r, "server", scenarioNewKey, []string{baselineMode, naiveMode, expiringMode, "transactional", "lease", "bare", overheadMode}, cfg.Clients)
	requireCells(t, r, "server", scenarioReplay, []string{baselineMode, naiveMode, expiringMode, "transactional", "lease", overheadMode}, cfg.Clients)
	for _, c := range r.Cells {
		switch {
		case c.Section != "server":
		case c.Mode == overheadMode:
			require.Zero(t, c.AllocsPerOpHandler)
		case c.Mode == "bare":
			// One INSERT: its few dozen allocations are within what a short
			// cell's process-wide count picks up from the tests running
			// beside it (a CI run once measured -12.8), so only bounded.
			require.Less(t, c.AllocsPerOpHandler, c.AllocsPerOpProcess)
		default:
			require.Positive(t, c.AllocsPerOpHandler, "%s %s at %d clients: the handler allocates", c.Mode, c.Scenario, c.Clients)
			require.Less(t, c.AllocsPerOpHandler, c.AllocsPerOpProcess)
		}
	}
	for _, c := range r.Cells {
		require.False(t, c.Section == "server" && c.Scenario == scenarioReplay && c.Mode == "bare", "the bare insert has no replay")
	}
	require.NotNil(t, r.Sweep)
	require.Equal(t, cfg.SweepRows, r.Sweep.Deleted)
	require.Contains(t, r.Machine.Postgres, ".")
	conn, err := pgx.Connect(context.Background(), cfg.DSN)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var left bool
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", r.Settings.PostgresSchema).Scan(&left))
	require.False(t, left, "the run's schema %s was not dropped", r.Settings.PostgresSchema)
	require.Contains(t, table.String(), "| transactional | 3 |")
	require.Contains(t, table.String(), "checks passed")
}

func TestShortRun_ClientSectionPassesEveryCheck(t *testing.T) {
	t.Parallel()
	cfg := shortConfig(t)
	cfg.Client = true
	_, err := run(context.Background(), cfg, io.Discard, io.Discard)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	requireCells(t, r, "client", "enqueue", []string{clientBaseline, "idemkit-submit", "goqite-send"}, cfg.Clients)
	require.Equal(t, []string{clientBaseline, "idemkit-submit", "goqite-send"}, r.Settings.Enqueuers)
}

// brokenModes answer like the bare insert but each breaks one check.
func brokenModes(env *pgEnv) []serverMode {
	return []serverMode{
		{name: "double-effect", handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = payment(r.Context(), env.pool, "double-effect", r, nil)
			resp, _ := payment(r.Context(), env.pool, "double-effect", r, nil)
			writeCreated(w, resp)
		})},
		{name: "replay-runs-handler", handler: paymentHandler("replay-runs-handler", func(*http.Request) execer { return env.pool }), replays: true},
	}
}

func TestRun_RefusesToReportAFailedCheck(t *testing.T) {
	t.Parallel()
	lostRow := enqueuer{name: "loses-rows", open: func(ctx context.Context, path string) (queue, error) {
		q, err := openInsertPerTx(ctx, path)
		var n atomic.Int64
		send := q.send
		q.send = func(ctx context.Context, body []byte) error {
			if n.Add(1)%2 == 0 {
				return nil // reports success, writes nothing
			}
			return send(ctx, body)
		}
		return q, err
	}}
	failing := enqueuer{name: "fails", open: func(ctx context.Context, path string) (queue, error) {
		q, err := openInsertPerTx(ctx, path)
		q.send = func(context.Context, []byte) error { return errors.New("disk full") }
		return q, err
	}}
	tests := []struct {
		name     string
		postgres bool
		mode     string // the broken server mode kept, if postgres
		enq      []enqueuer
		want     string
	}{
		{name: "an enqueue reported without its row", enq: []enqueuer{lostRow}, want: "one row per successful call"},
		{name: "an enqueue error", enq: []enqueuer{failing}, want: "no errors"},
		{name: "two effects for one 201", postgres: true, mode: "double-effect", want: "one effect row per fresh 201"},
		{name: "a replay that ran the handler", postgres: true, mode: "replay-runs-handler", want: "the handler ran again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := shortConfig(t)
			cfg.Clients = []int{1}
			cfg.Duration = 100 * time.Millisecond
			if tt.postgres {
				cfg.DSN = testpg.BaseDSN(t)
				cfg.Server = true
				cfg.extraModes = func(env *pgEnv) []serverMode {
					for _, m := range brokenModes(env) {
						if m.name == tt.mode {
							return []serverMode{m}
						}
					}
					return nil
				}
			} else {
				cfg.Client = true
				cfg.enqueuers = tt.enq
			}
			var table strings.Builder
			r, err := run(context.Background(), cfg, &table, io.Discard)
			require.Error(t, err)
			require.ErrorContains(t, err, "check failed")
			require.ErrorContains(t, err, tt.want)
			require.Nil(t, r)
			require.NoFileExists(t, cfg.Out, "a run that failed a check must not write a report")
			require.Empty(t, table.String(), "a run that failed a check must not print a table")
		})
	}
}

func TestParseProcStatCPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line    string
		want    int64
		wantErr bool
	}{
		{line: "cpu  100 5 50 9000 30 2 3 7 0 0\n", want: 100 + 5 + 50 + 2 + 3 + 7},
		{line: "cpu  1 2 3 4 5 6 7 8", want: 1 + 2 + 3 + 6 + 7 + 8},
		{line: "cpu0 1 2 3 4 5 6 7 8", wantErr: true},
		{line: "cpu  1 2 3", wantErr: true},
		{line: "cpu  1 2 x 4 5 6 7 8", wantErr: true},
		{line: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseProcStatCPU(tt.line)
		if tt.wantErr {
			require.Error(t, err, "%q", tt.line)
			continue
		}
		require.NoError(t, err, "%q", tt.line)
		require.Equal(t, tt.want, got, "%q", tt.line)
	}
}

func TestFlags_DescribeTheRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{args: nil, check: func(t *testing.T, c config) {
			require.Equal(t, []int{1, 8, 32}, c.Clients)
			require.True(t, c.Server && c.Client && c.Sweep && c.MySQL)
			require.Equal(t, 3, c.Rounds)
			require.Equal(t, 10*time.Second, c.Duration)
			require.Equal(t, 1_000_000, c.SweepRows)
		}},
		{args: []string{"-modes", "lease, transactional", "-new-keys-only"}, check: func(t *testing.T, c config) {
			require.Equal(t, []string{"lease", "transactional"}, c.Modes)
			require.True(t, c.NewKeysOnly)
		}},
		{args: []string{"-clients", "2, 4", "-sections", "client"}, check: func(t *testing.T, c config) {
			require.Equal(t, []int{2, 4}, c.Clients)
			require.True(t, c.Client)
			require.False(t, c.Server || c.Sweep || c.MySQL)
		}},
		{args: []string{"-sections", "mysql", "-mysql-dsn", "u@tcp(db:3306)/x"}, check: func(t *testing.T, c config) {
			require.True(t, c.MySQL)
			require.False(t, c.Server || c.Sweep || c.Client)
			require.Equal(t, "u@tcp(db:3306)/x", c.MySQLDSN)
		}},
		{args: []string{"-redis", "redis://127.0.0.1:6379/0"}, check: func(t *testing.T, c config) {
			require.Equal(t, "redis://127.0.0.1:6379/0", c.Redis)
		}},
		{args: []string{"-clients", "0"}, wantErr: "-clients"},
		{args: []string{"-sections", "server,disk"}, wantErr: "unknown section"},
		{args: []string{"-rounds", "0"}, wantErr: "positive"},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("bench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := bindFlags(fs)
		require.NoError(t, fs.Parse(tt.args))
		c, err := f.config()
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, "%q", tt.args)
			continue
		}
		require.NoError(t, err, "%q", tt.args)
		tt.check(t, c)
	}
}

// -modes keeps the baselines whatever it names, and refuses a mode that
// does not exist rather than run a comparison without it.
func TestSelectModes_KeepsTheBaseline(t *testing.T) {
	t.Parallel()
	modes := []serverMode{{name: baselineMode}, {name: naiveMode}, {name: "transactional"}, {name: "lease"}, noopMode()}
	all, err := selectModes(modes, nil)
	require.NoError(t, err)
	require.Len(t, all, 5)
	kept, err := selectModes(modes, []string{"lease"})
	require.NoError(t, err)
	require.Len(t, kept, 4)
	require.Equal(t, []string{baselineMode, naiveMode, "lease", overheadMode}, []string{kept[0].name, kept[1].name, kept[2].name, kept[3].name})
	_, err = selectModes(modes, []string{"lease", "leese"})
	require.ErrorContains(t, err, `unknown server mode "leese"`)
}

// TestFullRun is the full-length run with goqite (a test-only dependency),
// taking the command's flags after -args; it runs only with -full:
//
//	go test ./bench -run '^TestFullRun$' -count=1 -timeout 0 -v -args -full -out "$PWD/bench.json"
func TestFullRun(t *testing.T) {
	if !flags.full {
		t.Skip("the full-length run: go test ./bench -run '^TestFullRun$' -count=1 -timeout 0 -v -args -full [command flags]")
	}
	cfg, err := flags.config()
	require.NoError(t, err)
	_, err = run(context.Background(), cfg, os.Stdout, os.Stderr)
	require.NoError(t, err)
}

// The partition section drops exactly the seeded partition while claims
// run, and reports the WAL of the drop beside the sweep's.
func TestShortRun_PartitionSectionPassesEveryCheck(t *testing.T) {
	t.Parallel()
	cfg := shortConfig(t)
	cfg.DSN = testpg.BaseDSN(t)
	cfg.Sweep, cfg.Partition = true, true
	var table strings.Builder
	_, err := run(context.Background(), cfg, &table, io.Discard)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	require.NotNil(t, r.Partition)
	require.Equal(t, int64(cfg.SweepRows), r.Partition.Dropped)
	require.Positive(t, r.Sweep.WALBytes)
	require.Contains(t, table.String(), "partition: ")
	require.Contains(t, table.String(), "checks passed")
}

// A mode with a section of its own is measured in the server's rounds but
// reported under its section: no ratio to the server's baselines, its
// handler allocations taken against the server's noop route.
func TestRun_AModeOfItsOwnSectionIsReportedThere(t *testing.T) {
	// Not parallel: handler allocations are the process's mallocs minus
	// the noop route's, and a test running beside it allocates into both
	// (CI read -125 allocations per request with it parallel).
	cfg := shortConfig(t)
	cfg.DSN = testpg.BaseDSN(t)
	cfg.Server = true
	cfg.Clients = []int{2}
	cfg.NewKeysOnly = true
	cfg.Modes = []string{"own-section"}
	cfg.extraModes = func(env *pgEnv) []serverMode {
		return []serverMode{{name: "own-section", handler: paymentHandler("own-section", func(*http.Request) execer { return env.pool }), section: "elsewhere"}}
	}
	_, err := run(context.Background(), cfg, io.Discard, io.Discard)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	requireCells(t, r, "server", scenarioNewKey, []string{baselineMode, naiveMode, overheadMode}, cfg.Clients)
	var own []cell
	for _, c := range r.Cells {
		if c.Mode == "own-section" {
			own = append(own, c)
		}
	}
	require.Len(t, own, 1)
	require.Equal(t, "elsewhere", own[0].Section)
	require.Zero(t, own[0].Ratio, "no baseline in its section")
	require.Zero(t, own[0].RatioReference)
	require.Positive(t, own[0].AllocsPerOpHandler)
	require.Less(t, own[0].AllocsPerOpHandler, own[0].AllocsPerOpProcess)
}
