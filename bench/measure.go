package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// opFunc is one operation of a cell: an HTTP request and the check of its
// answer, or one enqueue. i numbers the operations of the cell from 0. An
// error is a failed operation; the cell stops that worker and fails.
type opFunc func(ctx context.Context, i int64) error

// loadResult is what one cell measured.
type loadResult struct {
	ok       int64
	errs     int64
	firstErr error
	elapsed  time.Duration
	lats     []time.Duration // sorted
	cpu      cpuDelta
	// Heap allocations of the whole process during the cell (server, load
	// generator and drivers together).
	mallocs, allocBytes uint64
}

// bounds limit a cell: it runs until d has passed and at least minOps
// operations were started, or maxOps were started, or stop is closed (nil:
// never).
type bounds struct {
	d              time.Duration
	minOps, maxOps int64
	stop           <-chan struct{}
}

// load runs op from clients goroutines within b. An operation in flight when
// the time is up is finished, never canceled: a canceled request could
// commit its effect after the client stopped counting.
func load(ctx context.Context, clients int, b bounds, op opFunc) *loadResult {
	var (
		seq atomic.Int64
		mu  sync.Mutex
		res loadResult
		wg  sync.WaitGroup
	)
	deadline := time.Now().Add(b.d)
	done := func() bool {
		select {
		case <-b.stop:
			return true
		default:
		}
		return ctx.Err() != nil || (!time.Now().Before(deadline) && seq.Load() >= b.minOps)
	}
	opCtx := context.WithoutCancel(ctx)
	var memBefore runtime.MemStats
	runtime.ReadMemStats(&memBefore)
	before := sampleCPU()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lats := make([]time.Duration, 0, 1024)
			var ok, errs int64
			var firstErr error
			defer func() {
				mu.Lock()
				res.lats = append(res.lats, lats...)
				res.ok += ok
				res.errs += errs
				if res.firstErr == nil {
					res.firstErr = firstErr
				}
				mu.Unlock()
			}()
			for !done() {
				i := seq.Add(1) - 1
				if i >= b.maxOps {
					return
				}
				t0 := time.Now()
				if err := op(opCtx, i); err != nil {
					errs++
					firstErr = err
					return
				}
				lats = append(lats, time.Since(t0))
				ok++
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cpu = sampleCPU().sub(before)
	var memAfter runtime.MemStats
	runtime.ReadMemStats(&memAfter)
	res.mallocs = memAfter.Mallocs - memBefore.Mallocs
	res.allocBytes = memAfter.TotalAlloc - memBefore.TotalAlloc
	slices.Sort(res.lats)
	return &res
}

func (r *loadResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok) / r.elapsed.Seconds()
}

// pct returns the p-quantile (0..1) of the latencies in microseconds.
func (r *loadResult) pct(p float64) float64 {
	if len(r.lats) == 0 {
		return 0
	}
	return float64(r.lats[int(float64(len(r.lats)-1)*p)]) / float64(time.Microsecond)
}

// cell turns a result into a report cell (without its ratio).
func (r *loadResult) cell(section, scenario, mode string, clients, round, order int) cell {
	c := cell{
		Section: section, Scenario: scenario, Mode: mode, Clients: clients, Round: round, Order: order,
		Ops: r.ok, Errors: r.errs, Seconds: r.elapsed.Seconds(),
		OpsPerSec: r.rate(), P50Micros: r.pct(0.50), P99Micros: r.pct(0.99),
		CPUMicrosPerOpProcess: -1, CPUMicrosPerOpHost: -1,
	}
	if r.ok > 0 {
		c.AllocsPerOpProcess = float64(r.mallocs) / float64(r.ok)
		c.AllocBytesPerOpProcess = float64(r.allocBytes) / float64(r.ok)
		if r.cpu.process >= 0 {
			c.CPUMicrosPerOpProcess = float64(r.cpu.process.Microseconds()) / float64(r.ok)
		}
		if r.cpu.host >= 0 {
			c.CPUMicrosPerOpHost = float64(r.cpu.host.Microseconds()) / float64(r.ok)
		}
	}
	return c
}

// cpuSample is the CPU time used so far by this process (getrusage: user +
// system, every thread) and by the whole host (/proc/stat: every state but
// idle and iowait, every core). A negative field is unavailable.
type cpuSample struct {
	process time.Duration
	host    time.Duration
}

type cpuDelta = cpuSample

func (s cpuSample) sub(before cpuSample) cpuDelta {
	d := cpuDelta{process: -1, host: -1}
	if s.process >= 0 && before.process >= 0 {
		d.process = s.process - before.process
	}
	if s.host >= 0 && before.host >= 0 {
		d.host = s.host - before.host
	}
	return d
}

func sampleCPU() cpuSample {
	return cpuSample{process: processCPU(), host: hostCPU()}
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI Go
// supports).
const userHZ = 100

// hostCPU reads the busy time of all cores from the first line of /proc/stat:
// user nice system idle iowait irq softirq steal ...; -1 where there is none.
func hostCPU() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return -1
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return -1
	}
	busy, err := parseProcStatCPU(line)
	if err != nil {
		return -1
	}
	return time.Duration(busy) * time.Second / userHZ
}

// parseProcStatCPU returns the busy ticks of the aggregate "cpu" line of
// /proc/stat: the sum of user, nice, system, irq, softirq and steal (guest
// time is already counted in user).
func parseProcStatCPU(line string) (int64, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("not the aggregate cpu line of /proc/stat: %q", line)
	}
	var v [8]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	user, nice, system, irq, softirq, steal := v[0], v[1], v[2], v[5], v[6], v[7]
	return user + nice + system + irq + softirq + steal, nil
}
