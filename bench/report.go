package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// reportVersion is the version of the JSON report's shape.
// Version 2: the server baseline is the batched hand-written POST; the
// naive one is the reference of ratio_to_reference.
const reportVersion = 2

// report is the JSON output of a run that passed every check.
type report struct {
	Version  int          `json:"version"`
	Started  time.Time    `json:"started"`
	Finished time.Time    `json:"finished"`
	Machine  machine      `json:"machine"`
	Settings settings     `json:"settings"`
	Checks   []string     `json:"checks"` // the checks every cell passed
	Cells    []cell       `json:"cells"`
	Summary  []summary    `json:"summary"`
	Sweep    *sweepResult `json:"sweep,omitempty"`
	// Partition is the partition section (pgstore Config.Partitioned).
	Partition *partitionResult `json:"partition,omitempty"`
	// Skipped says which sections asked for were not run, and why.
	Skipped []string `json:"skipped,omitempty"`
}

type machine struct {
	NProc     int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Postgres  string `json:"postgres,omitempty"`
	MySQL     string `json:"mysql,omitempty"` // the server's VERSION()
	// LoadAvg is /proc/loadavg when the run started and when it finished:
	// a load well above nproc means the host was busy with something else.
	LoadAvgStart  string `json:"loadavg_start,omitempty"`
	LoadAvgFinish string `json:"loadavg_finish,omitempty"`
}

type settings struct {
	Rounds          int      `json:"rounds"`
	CellSeconds     float64  `json:"cell_seconds"`
	MaxOpsPerCell   int64    `json:"max_ops_per_cell"`
	Clients         []int    `json:"clients"`
	PostgresPool    int      `json:"postgres_pool"`
	PostgresSchema  string   `json:"postgres_schema,omitempty"` // created for the run, dropped at its end
	MySQLDatabase   string   `json:"mysql_database,omitempty"`  // created for the run, dropped at its end
	Sections        []string `json:"sections"`
	SweepRows       int      `json:"sweep_rows,omitempty"`
	SweepClients    int      `json:"sweep_clients,omitempty"`
	ClientDirectory string   `json:"client_directory,omitempty"`
	ClientFS        string   `json:"client_filesystem,omitempty"` // "tmpfs" makes fsync free: not a valid client run
	Enqueuers       []string `json:"enqueuers,omitempty"`
}

// cell is one mode measured once: one round, one scenario, one client count.
type cell struct {
	Section   string  `json:"section"`  // server, client, sweep
	Scenario  string  `json:"scenario"` // new-key, replay, enqueue, claim
	Mode      string  `json:"mode"`
	Clients   int     `json:"clients"`
	Round     int     `json:"round"`
	Order     int     `json:"order"` // position of the mode in its round
	Ops       int64   `json:"ops"`   // successful operations
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	// CPU time per successful operation: of this process (server, load
	// generator and, for the client section, SQLite) and of the whole host
	// (PostgreSQL and anything else running included). -1: unavailable.
	CPUMicrosPerOpProcess float64 `json:"cpu_us_per_op_process"`
	CPUMicrosPerOpHost    float64 `json:"cpu_us_per_op_host"`
	// Heap allocations per successful operation in this process: the
	// server, the load generator and the drivers together (the package
	// benchmarks of server/ isolate the middleware's own).
	AllocsPerOpProcess     float64 `json:"allocs_per_op_process"`
	AllocBytesPerOpProcess float64 `json:"alloc_bytes_per_op_process"`
	// AllocsPerOpHandler is AllocsPerOpProcess minus the overhead route's
	// (noop) in the same round, scenario and client count: the allocations
	// of the mode's handler (middleware, store, driver, effect) without the
	// load generator's and the HTTP stack's. -1 where the section has no
	// overhead route.
	AllocsPerOpHandler float64 `json:"allocs_per_op_handler"`
	// Ratio is OpsPerSec over the baseline's in the same round, scenario
	// and client count (0 where there is no baseline: the sweep).
	Ratio float64 `json:"ratio_to_baseline"`
	// RatioReference is OpsPerSec over the second reference's (the naive
	// hand-written POST) in the same round, scenario and client count (0
	// where the section has none).
	RatioReference float64 `json:"ratio_to_reference"`

	// servedBy is the section whose server and rounds measured the cell
	// (its overhead route's allocations are subtracted); "" for the client
	// and sweep sections.
	servedBy string
}

// summary is the median over rounds of one mode at one client count.
type summary struct {
	Section               string  `json:"section"`
	Scenario              string  `json:"scenario"`
	Mode                  string  `json:"mode"`
	Clients               int     `json:"clients"`
	Rounds                int     `json:"rounds"`
	OpsPerSec             float64 `json:"ops_per_sec"`
	P50Micros             float64 `json:"p50_us"`
	P99Micros             float64 `json:"p99_us"`
	CPUMicrosPerOpProcess float64 `json:"cpu_us_per_op_process"`
	CPUMicrosPerOpHost    float64 `json:"cpu_us_per_op_host"`
	AllocsPerOpProcess    float64 `json:"allocs_per_op_process"`
	AllocsPerOpHandler    float64 `json:"allocs_per_op_handler"`
	Ratio                 float64 `json:"ratio_to_baseline"`  // median of the per-round ratios
	RatioReference        float64 `json:"ratio_to_reference"` // median of the per-round ratios
}

type sweepResult struct {
	ExpiredRows      int     `json:"expired_rows"`
	SeedSeconds      float64 `json:"seed_seconds"`
	Deleted          int     `json:"deleted"`
	SweepSeconds     float64 `json:"sweep_seconds"`
	Clients          int     `json:"clients"`
	P99MicrosWithout float64 `json:"claim_p99_us_without_sweep"`
	P99MicrosDuring  float64 `json:"claim_p99_us_during_sweep"`
	P99Ratio         float64 `json:"p99_ratio"`
	// WALBytes is what the whole cluster wrote to the WAL during the sweep,
	// and BackgroundWALBytesPerSec its rate during the cell without a sweep.
	WALBytes                 int64   `json:"wal_bytes_during_sweep"`
	BackgroundWALBytesPerSec float64 `json:"background_wal_bytes_per_sec"`
}

func newReport(cfg config) *report {
	r := &report{
		Version: reportVersion,
		Started: time.Now().UTC(),
		Machine: machine{
			NProc: runtime.NumCPU(), CPUModel: cpuModel(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			LoadAvgStart: loadAvg(),
		},
		Settings: settings{
			Rounds: cfg.Rounds, CellSeconds: cfg.Duration.Seconds(), MaxOpsPerCell: cfg.MaxOps,
			Clients: cfg.Clients, PostgresPool: cfg.Pool,
		},
	}
	if cfg.Server {
		r.Settings.Sections = append(r.Settings.Sections, "server")
		r.Checks = append(r.Checks, checkNoErrors, checkOneEffect, checkReplayIdentical)
	}
	if cfg.Sweep {
		r.Settings.Sections = append(r.Settings.Sections, "sweep")
		r.Settings.SweepRows, r.Settings.SweepClients = cfg.SweepRows, cfg.SweepCalls
		r.Checks = append(r.Checks, checkNoErrors, checkSweepDeleted)
	}
	if cfg.Partition {
		r.Settings.Sections = append(r.Settings.Sections, "partition")
		r.Settings.SweepRows, r.Settings.SweepClients = cfg.SweepRows, cfg.SweepCalls
		r.Checks = append(r.Checks, checkNoErrors, checkPartitionDropped)
	}
	if cfg.MySQL {
		r.Settings.Sections = append(r.Settings.Sections, "mysql")
		r.Checks = append(r.Checks, checkNoErrors, checkOneEffect, checkReplayIdentical)
	}
	if cfg.Client {
		r.Settings.Sections = append(r.Settings.Sections, "client")
		r.Settings.ClientDirectory = cfg.Dir
		r.Settings.ClientFS = fsType(cfg.Dir)
		for _, e := range cfg.enqueuers {
			r.Settings.Enqueuers = append(r.Settings.Enqueuers, e.name)
		}
		r.Checks = append(r.Checks, checkNoErrors, checkOneRow)
	}
	slices.Sort(r.Checks)
	r.Checks = slices.Compact(r.Checks)
	return r
}

// The checks a reported run passed.
const (
	checkNoErrors         = "no errors: every operation succeeded (201, or a queued row)"
	checkOneEffect        = "one effect row per fresh 201, none per replay"
	checkReplayIdentical  = "every replay is a 201 with Idempotent-Replayed: true, the first response's Content-Type and its body byte for byte"
	checkOneRow           = "each queue file holds one row per successful call"
	checkSweepDeleted     = "the sweep deleted exactly the seeded expired rows; every claim acquired its fresh key"
	checkPartitionDropped = "the drop removed exactly the seeded partition and its rows; every claim acquired its fresh key"
)

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAvg is the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func (r *report) add(c cell) { r.Cells = append(r.Cells, c) }

// baselineOf names the mode each section's ratios are taken against.
var baselineOf = map[string]string{"server": baselineMode, "client": clientBaseline, "mysql": mysqlBaseline, "redis": redisBaseline}

// referenceOf names the mode of each section's second ratio, if it has one.
var referenceOf = map[string]string{"server": naiveMode}

type groupKey struct {
	section, scenario string
	clients, round    int
}

// finish sets the ratios (new-key baseline for modes with no replay cell
// of their own is the new-key cell) and the per-mode medians.
func (r *report) finish() {
	r.Finished = time.Now().UTC()
	r.Machine.LoadAvgFinish = loadAvg()
	base, ref, overhead := map[groupKey]float64{}, map[groupKey]float64{}, map[groupKey]float64{}
	for _, c := range r.Cells {
		k := groupKey{c.Section, c.Scenario, c.Clients, c.Round}
		if c.Mode == overheadMode {
			overhead[groupKey{c.servedBy, c.Scenario, c.Clients, c.Round}] = c.AllocsPerOpProcess
		}
		if b, ok := baselineOf[c.Section]; ok && c.Mode == b {
			base[k] = c.OpsPerSec
		}
		if b, ok := referenceOf[c.Section]; ok && c.Mode == b {
			ref[k] = c.OpsPerSec
		}
	}
	for i, c := range r.Cells {
		k := groupKey{c.Section, c.Scenario, c.Clients, c.Round}
		if b := base[k]; b > 0 {
			r.Cells[i].Ratio = c.OpsPerSec / b
		}
		if b := ref[k]; b > 0 {
			r.Cells[i].RatioReference = c.OpsPerSec / b
		}
		r.Cells[i].AllocsPerOpHandler = -1
		if o, ok := overhead[groupKey{c.servedBy, c.Scenario, c.Clients, c.Round}]; ok && c.servedBy != "" {
			r.Cells[i].AllocsPerOpHandler = c.AllocsPerOpProcess - o
		}
	}
	type sumKey struct {
		section, scenario, mode string
		clients                 int
	}
	groups := map[sumKey][]cell{}
	var keys []sumKey
	for _, c := range r.Cells {
		k := sumKey{c.Section, c.Scenario, c.Mode, c.Clients}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], c)
	}
	r.Summary = nil
	for _, k := range keys {
		cs := groups[k]
		pick := func(f func(cell) float64) float64 {
			v := make([]float64, len(cs))
			for i, c := range cs {
				v[i] = f(c)
			}
			return median(v)
		}
		r.Summary = append(r.Summary, summary{
			Section: k.section, Scenario: k.scenario, Mode: k.mode, Clients: k.clients, Rounds: len(cs),
			OpsPerSec:             pick(func(c cell) float64 { return c.OpsPerSec }),
			P50Micros:             pick(func(c cell) float64 { return c.P50Micros }),
			P99Micros:             pick(func(c cell) float64 { return c.P99Micros }),
			CPUMicrosPerOpProcess: pick(func(c cell) float64 { return c.CPUMicrosPerOpProcess }),
			CPUMicrosPerOpHost:    pick(func(c cell) float64 { return c.CPUMicrosPerOpHost }),
			AllocsPerOpProcess:    pick(func(c cell) float64 { return c.AllocsPerOpProcess }),
			AllocsPerOpHandler:    pick(func(c cell) float64 { return c.AllocsPerOpHandler }),
			Ratio:                 pick(func(c cell) float64 { return c.Ratio }),
			RatioReference:        pick(func(c cell) float64 { return c.RatioReference }),
		})
	}
	// Group by section and scenario, in the order they were run.
	first := map[string]int{}
	for i, c := range r.Cells {
		if _, ok := first[c.Section+" "+c.Scenario]; !ok {
			first[c.Section+" "+c.Scenario] = i
		}
	}
	slices.SortStableFunc(r.Summary, func(a, b summary) int {
		return cmp.Compare(first[a.Section+" "+a.Scenario], first[b.Section+" "+b.Scenario])
	})
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeTable prints the summary as Markdown tables, one per section and
// scenario.
func (r *report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "\n%d round(s) × %.1f s per cell; %d CPUs (%s), %s; medians over rounds; ratio = ops/s over the baseline's in the same round (ratio to reference: over the reference's); allocs/op process count the whole process, load generator included; allocs/op handler subtract the noop route's\n",
		r.Settings.Rounds, r.Settings.CellSeconds, r.Machine.NProc, r.Machine.CPUModel, r.Machine.GoVersion)
	fmt.Fprintf(w, "load average %s at the start, %s at the end\n", r.Machine.LoadAvgStart, r.Machine.LoadAvgFinish)
	if r.Machine.Postgres != "" {
		fmt.Fprintf(w, "PostgreSQL %s, pool %d\n", r.Machine.Postgres, r.Settings.PostgresPool)
	}
	if r.Machine.MySQL != "" {
		fmt.Fprintf(w, "MySQL %s, pool %d\n", r.Machine.MySQL, r.Settings.PostgresPool)
	}
	for _, s := range r.Skipped {
		fmt.Fprintln(w, s)
	}
	last := ""
	for _, s := range r.Summary {
		if g := s.Section + " " + s.Scenario; g != last {
			last = g
			fmt.Fprintf(w, "\n%s, %s (baseline: %s; reference: %s)\n\n", s.Section, s.Scenario,
				cmp.Or(baselineOf[s.Section], "none"), cmp.Or(referenceOf[s.Section], "none"))
			fmt.Fprintln(w, "| mode | clients | ops/s | ratio | ratio to reference | p50 | p99 | CPU µs/op process | CPU µs/op host | allocs/op process | allocs/op handler |")
			fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
		}
		handler := "—"
		if s.AllocsPerOpHandler != -1 {
			handler = fmt.Sprintf("%.0f", s.AllocsPerOpHandler)
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %s | %.0f | %.0f | %.0f | %s |\n", s.Mode, s.Clients, s.OpsPerSec,
			ratioText(s.Ratio), ratioText(s.RatioReference),
			micros(s.P50Micros), micros(s.P99Micros), s.CPUMicrosPerOpProcess, s.CPUMicrosPerOpHost, s.AllocsPerOpProcess, handler)
	}
	if sw := r.Sweep; sw != nil {
		fmt.Fprintf(w, "\nsweep: %d expired rows deleted in %.1f s; claim p99 at %d clients %s without, %s during (%.2f×); WAL during the sweep %.1f MB (cluster-wide; background %.2f MB/s)\n",
			sw.Deleted, sw.SweepSeconds, sw.Clients, micros(sw.P99MicrosWithout), micros(sw.P99MicrosDuring), sw.P99Ratio,
			float64(sw.WALBytes)/1e6, sw.BackgroundWALBytesPerSec/1e6)
	}
	if p := r.Partition; p != nil {
		fmt.Fprintf(w, "partition: %d expired rows dropped with their partition in %.3f s; claim p99 at %d clients %s without, %s during (%.2f×); WAL during the drop %.3f MB (cluster-wide; background %.2f MB/s)\n",
			p.Dropped, p.DropSeconds, p.Clients, micros(p.P99MicrosWithout), micros(p.P99MicrosDuring), p.P99Ratio,
			float64(p.WALBytes)/1e6, p.BackgroundWALBytesPerSec/1e6)
	}
	fmt.Fprintf(w, "\nchecks passed: %s\n", strings.Join(r.Checks, "; "))
}

// ratioText is a ratio with two decimals, or "—" where there is none.
func ratioText(r float64) string {
	if r <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", r)
}

func micros(us float64) string {
	return (time.Duration(us * float64(time.Microsecond))).Round(time.Microsecond).String()
}

func (c cell) progressLine() string {
	return fmt.Sprintf("round %d  %-6s %-8s %-15s %3d clients: %8.0f ops/s  p50 %-9s p99 %-9s cpu/op %4.0fµs proc %4.0fµs host",
		c.Round, c.Section, c.Scenario, c.Mode, c.Clients, c.OpsPerSec, micros(c.P50Micros), micros(c.P99Micros),
		c.CPUMicrosPerOpProcess, c.CPUMicrosPerOpHost)
}
