// Command bench is idemkit's side-by-side performance harness. One process
// serves, on loopback, a hand-written idempotent POST with its statements
// pipelined in three round trips (the baseline) and the same written naively
// in five (the second reference), the same POST behind idemkit's middleware
// in transactional and in lease mode, and a bare insert with no idempotency
// (the upper bound), all on one PostgreSQL schema of its own; a load
// generator in the same process drives them at each client count, new keys
// and replays, with the modes interleaved in every round and their order
// rotated from round to round. A mysql section does the same on a MySQL or
// MariaDB database of its own: idemkit's mysqlstore in both modes next to
// the article's insert-and-catch (skipped, with a message, when no MySQL DSN
// is set). A client section does the same for durable enqueue on SQLite (one
// INSERT per transaction, idemkit Submit and, in the test build, goqite
// Send), and a sweeper section measures the claim p99 while a sweep deletes
// expired rows.
//
// Every cell is checked while it is measured: one effect row per fresh 201,
// replays byte-identical to the first response, one queued row per successful
// enqueue, no errors. A run that fails a check reports nothing and exits 1.
//
//	go run ./bench -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
//	    -mysql-dsn 'root@tcp(127.0.0.1:3306)/test' -out bench.json
//
// goqite is a test-only dependency of the module, so the run that includes it
// is the test binary with the same flags (see BENCHMARKS.md):
//
//	go test ./bench -run '^TestFullRun$' -count=1 -timeout 0 -v -args -full -out "$PWD/bench.json"
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// config is one run of the harness. Zero fields get the defaults of
// withDefaults.
type config struct {
	DSN         string        // PostgreSQL; the server and sweep sections need it
	MySQLDSN    string        // MySQL/MariaDB (go-sql-driver form); the mysql section needs it
	Out         string        // JSON report path; "" writes none
	Rounds      int           // rounds of every section
	Duration    time.Duration // length of one cell
	MaxOps      int64         // upper bound of operations in one cell
	MinOps      int64         // a cell runs past Duration until it started this many
	Clients     []int         // concurrent clients (server) and callers (client)
	Pool        int           // PostgreSQL pool size
	Server      bool          // run the server section
	Client      bool          // run the client (enqueue) section
	Sweep       bool          // run the sweeper section
	Partition   bool          // run the partition section (the sweep's rows dropped with their partition)
	MySQL       bool          // run the mysql section (skipped when MySQLDSN is "")
	SweepRows   int           // expired rows the sweep deletes
	SweepCalls  int           // concurrent claimers during the sweep cells
	Dir         string        // where the client section's SQLite files go
	ReplayPool  int           // completed keys kept per mode for the replay cells
	Modes       []string      // server modes to run besides the baselines; nil: all
	NewKeysOnly bool          // the server section runs no replay cells
	Redis       string        // redis://…: add the Redis modes (see redisModes)
	sweepMaxDur time.Duration // bound of the during-sweep cell

	// Test hooks: extra server modes and the enqueuers to measure (nil:
	// the built-in ones plus those registered by the build).
	extraModes func(*pgEnv) []serverMode
	enqueuers  []enqueuer
}

func (c config) withDefaults() config {
	c.Rounds = cmp.Or(c.Rounds, 3)
	c.Duration = cmp.Or(c.Duration, 10*time.Second)
	c.MaxOps = cmp.Or(c.MaxOps, 2_000_000)
	c.MinOps = cmp.Or(c.MinOps, 1)
	if len(c.Clients) == 0 {
		c.Clients = []int{1, 8, 32}
	}
	c.Pool = cmp.Or(c.Pool, 16)
	c.SweepRows = cmp.Or(c.SweepRows, 1_000_000)
	c.SweepCalls = cmp.Or(c.SweepCalls, 8)
	c.Dir = cmp.Or(c.Dir, os.TempDir())
	c.ReplayPool = cmp.Or(c.ReplayPool, 4096)
	c.sweepMaxDur = cmp.Or(c.sweepMaxDur, 10*time.Minute)
	if c.enqueuers == nil {
		c.enqueuers = append(builtinEnqueuers(), registeredEnqueuers...)
	}
	return c
}

// cell is the bounds of one cell.
func (c config) cell() bounds { return bounds{d: c.Duration, minOps: c.MinOps, maxOps: c.MaxOps} }

// flags are the command line of both the command and the test binary
// (TestFullRun), so that the full run and go run take the same flags.
var flags = bindFlags(flag.CommandLine)

// cpuProfile is the command's own flag (go test has -cpuprofile).
var cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (the command only)")

type cmdFlags struct {
	cfg      config
	clients  string
	sections string
	modes    string
	full     bool
}

func bindFlags(fs *flag.FlagSet) *cmdFlags {
	f := &cmdFlags{}
	fs.StringVar(&f.cfg.DSN, "dsn", os.Getenv("IDEM_TEST_POSTGRES"), "PostgreSQL DSN (defaults to $IDEM_TEST_POSTGRES); the run uses a schema of its own and drops it")
	fs.StringVar(&f.cfg.MySQLDSN, "mysql-dsn", os.Getenv("IDEM_TEST_MYSQL"), "MySQL/MariaDB DSN, go-sql-driver form (defaults to $IDEM_TEST_MYSQL); the run uses a database of its own and drops it; unset: the mysql section is skipped")
	fs.StringVar(&f.cfg.Out, "out", "", "write the JSON report to this file")
	fs.IntVar(&f.cfg.Rounds, "rounds", 3, "rounds; each round runs every cell once, modes in rotated order")
	fs.DurationVar(&f.cfg.Duration, "duration", 10*time.Second, "length of one cell (one mode at one client count)")
	fs.Int64Var(&f.cfg.MaxOps, "max-ops", 2_000_000, "upper bound of operations in one cell")
	fs.StringVar(&f.clients, "clients", "1,8,32", "comma-separated concurrent clients (server) and callers (client)")
	fs.IntVar(&f.cfg.Pool, "pool", 16, "pool size of each database (PostgreSQL, MySQL)")
	fs.StringVar(&f.sections, "sections", "server,client,sweep,mysql", "comma-separated sections to run: server, client, sweep, partition, mysql")
	fs.IntVar(&f.cfg.SweepRows, "sweep-rows", 1_000_000, "expired rows the sweep deletes in the sweeper section")
	fs.IntVar(&f.cfg.SweepCalls, "sweep-clients", 8, "concurrent claimers in the sweeper section")
	fs.StringVar(&f.cfg.Dir, "dir", os.TempDir(), "directory for the client section's SQLite files (use a real disk, not tmpfs)")
	fs.StringVar(&f.modes, "modes", "", "comma-separated server modes to run besides the baselines (batched, handwritten); empty: all")
	fs.BoolVar(&f.cfg.NewKeysOnly, "new-keys-only", false, "the server section runs only the new-key cells")
	fs.StringVar(&f.cfg.Redis, "redis", "", "redis://host:port/n: add the modes redis-handwritten (SET NX PX + SET) and redis-lease (redisstore)")
	fs.BoolVar(&f.full, "full", false, "with go test: run TestFullRun (ignored by the command)")
	return f
}

// config returns the run the flags describe.
func (f *cmdFlags) config() (config, error) {
	cfg := f.cfg
	cfg.Clients = nil
	for _, s := range strings.Split(f.clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("-clients: %q is not a positive number", s)
		}
		cfg.Clients = append(cfg.Clients, n)
	}
	for _, s := range strings.Split(f.modes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Modes = append(cfg.Modes, s)
		}
	}
	for _, s := range strings.Split(f.sections, ",") {
		switch strings.TrimSpace(s) {
		case "server":
			cfg.Server = true
		case "client":
			cfg.Client = true
		case "sweep":
			cfg.Sweep = true
		case "partition":
			cfg.Partition = true
		case "mysql":
			cfg.MySQL = true
		case "":
		default:
			return cfg, fmt.Errorf("-sections: unknown section %q (want server, client, sweep, partition, mysql)", s)
		}
	}
	if cfg.Rounds < 1 || cfg.Duration <= 0 || cfg.MaxOps < 1 || cfg.Pool < 1 || cfg.SweepRows < 1 || cfg.SweepCalls < 1 {
		return cfg, errors.New("-rounds, -duration, -max-ops, -pool, -sweep-rows and -sweep-clients must be positive")
	}
	return cfg, nil
}

func main() {
	flag.Parse()
	cfg, err := flags.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if _, err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run runs the sections cfg asks for, checks every cell, and only when all
// checks passed writes the JSON report and prints the table. progress gets a
// line per cell.
func run(ctx context.Context, cfg config, out, progress io.Writer) (*report, error) {
	cfg = cfg.withDefaults()
	rep := newReport(cfg)
	if cfg.Server || cfg.Sweep || cfg.Partition {
		if cfg.DSN == "" {
			return nil, errors.New("the server and sweep sections need PostgreSQL: set -dsn or IDEM_TEST_POSTGRES (or -sections client)")
		}
		env, err := newPgEnv(ctx, cfg)
		if err != nil {
			return nil, err
		}
		defer env.close()
		rep.Machine.Postgres, rep.Settings.PostgresSchema = env.version, env.schema
		if cfg.Server {
			if err := runServer(ctx, cfg, &env.target, rep, progress); err != nil {
				return nil, fmt.Errorf("server section: %w", err)
			}
		}
		if cfg.Sweep {
			if err := runSweep(ctx, cfg, env, rep, progress); err != nil {
				return nil, fmt.Errorf("sweeper section: %w", err)
			}
		}
		if cfg.Partition {
			if err := runPartition(ctx, cfg, env, rep, progress); err != nil {
				return nil, fmt.Errorf("partition section: %w", err)
			}
		}
	}
	if cfg.MySQL {
		if err := runMySQL(ctx, cfg, rep, progress); err != nil {
			return nil, fmt.Errorf("mysql section: %w", err)
		}
	}
	if cfg.Client {
		if err := runClient(ctx, cfg, rep, progress); err != nil {
			return nil, fmt.Errorf("client section: %w", err)
		}
	}
	rep.finish()
	if cfg.Out != "" {
		if err := rep.writeJSON(cfg.Out); err != nil {
			return nil, err
		}
	}
	rep.writeTable(out)
	return rep, nil
}
