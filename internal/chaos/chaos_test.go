package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/faultproxy"
	"github.com/idemkit/idemkit/internal/testpg"
)

// seedEnv overrides the chaos seed, to replay a failure; dumpEnv names a
// directory where each run writes its server and CLI logs.
const (
	seedEnv = "IDEMKIT_CHAOS_SEED"
	dumpEnv = "IDEMKIT_CHAOS_DUMP"
)

// regressionSeeds are run on every full run, on top of the default seed:
// a seed that once failed stays here. None has failed yet (seeds 1, 2, 3
// and the default pass).
var regressionSeeds = []uint64{}

// chaosSeedDefault is the seed of a run without IDEMKIT_CHAOS_SEED.
const chaosSeedDefault = 20261201

// chaosConfig is one chaos run.
type chaosConfig struct {
	name        string
	store       string
	mode        string        // payments --mode
	window      time.Duration // payments --window, and the clients' Config.Window
	sweep       time.Duration // payments --sweep
	lease       time.Duration // payments --lease (lease mode)
	delay       time.Duration // payments --delay: handlers in flight when the server is killed
	replicas    int           // payments processes on the one database, behind a round-robin forwarder
	seed        uint64
	accounts    int
	perAccount  int // intents per account
	clientKills int
	serverKills int
	rates       faultproxy.Rates
	// mayExpire allows intents to end expired (a window shorter than the
	// run): each then has at most one payment instead of exactly one.
	mayExpire bool
}

// chaosConfigs are the runs of TestChaos: transactional mode on both
// stores; lease mode, where a server kill mid-handler is resolved by a
// takeover and the ledger's unique key; two server processes on one
// PostgreSQL schema, so that retries race the original on another process;
// and a window of seconds with the sweeper deleting expired records every
// 100ms while clients retry.
func chaosConfigs(seed uint64, short bool) []chaosConfig {
	base := chaosConfig{
		mode:        "transactional",
		window:      time.Hour,
		sweep:       time.Second,
		seed:        seed,
		accounts:    4,
		perAccount:  250,
		clientKills: 12,
		serverKills: 3,
		rates: faultproxy.Rates{
			DropResponse: 0.06, Reset: 0.05, Unavailable: 0.03, Delay: 0.05, SlowWrite: 0.05,
		},
	}
	if short {
		base.perAccount, base.clientKills, base.serverKills = 25, 4, 2
		base.rates.DropResponse = 0.12 // enough replays in 100 intents
	}
	pg, lite := base, base
	pg.name, pg.store, pg.delay = "postgres", storePostgres, 10*time.Millisecond
	lite.name, lite.store = "sqlite", storeSQLite
	lease := pg
	lease.name, lease.mode, lease.lease, lease.delay = "postgres-lease", "lease", 2*time.Second, 50*time.Millisecond
	lease.perAccount = max(base.perAccount/2, 25)
	replicas := pg
	replicas.name, replicas.replicas = "postgres-2-replicas", 2
	replicas.perAccount = max(base.perAccount/2, 25)
	liteReplicas := lite
	liteReplicas.name, liteReplicas.replicas = "sqlite-2-replicas", 2
	liteReplicas.perAccount = max(base.perAccount/2, 25)
	sweeper := lite
	sweeper.name, sweeper.window, sweeper.sweep, sweeper.mayExpire = "sqlite-sweeper", 4*time.Second, 100*time.Millisecond, true
	sweeper.perAccount = max(base.perAccount/4, 25)
	return []chaosConfig{pg, lite, lease, replicas, liteReplicas, sweeper}
}

// TestChaos throws everything at the payments API at once: the real server
// process behind the fault proxy (seeded, keyed by Idempotency-Key and
// attempt: dropped responses after the commit, resets before forwarding,
// 503 + Retry-After, delays, slow writes), one client process per account
// (two for the first account, sharing its queue) submitting through the
// SDK, client processes SIGKILLed and restarted at seeded moments, the
// server SIGKILLed and restarted on its port a few times while requests are
// in flight. Then it checks, from the payments table, GET /v1/payments of
// every account, the server's log and every queue: every intent is
// terminal (succeeded, or expired where the window is shorter than the
// run), every succeeded intent has exactly one payment (matched by
// idempotency key, description, amount and the payment id the client
// recorded), no payment without an intent, no account sees another's
// payment, no key was executed twice in transactional mode, and replays
// happened. It logs one summary line per run.
//
// The runs (see chaosConfigs) go one after the other, not in parallel: each
// keeps both cores busy.
func TestChaos(t *testing.T) {
	t.Parallel()
	seeds := []uint64{chaosSeedDefault}
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s", seedEnv)
		seeds = []uint64{s}
	} else if !testing.Short() {
		seeds = append(seeds, regressionSeeds...)
	}
	for _, seed := range seeds {
		for _, cfg := range chaosConfigs(seed, testing.Short()) {
			t.Run(fmt.Sprintf("%s/seed=%d", cfg.name, seed), func(t *testing.T) {
				runChaos(t, cfg)
			})
		}
	}
}

// chaosSlot is one client process, restarted after each kill.
type chaosSlot struct {
	name    string
	account string
	queue   string
	kills   []time.Duration // the lifetimes of the generations to kill
}

func runChaos(t *testing.T, cfg chaosConfig) {
	bins := binaries(t)
	dir := t.TempDir()
	ctx := deadline(t, 240*time.Second) // generous: CI runs every package at once
	started := time.Now()
	t.Logf("seed %d (replay with %s=%d)", cfg.seed, seedEnv, cfg.seed)

	var target string
	args := []string{"--window", cfg.window.String(), "--mode", cfg.mode, "--sweep", cfg.sweep.String()}
	if cfg.lease > 0 {
		args = append(args, "--lease", cfg.lease.String())
	}
	if cfg.delay > 0 {
		args = append(args, "--delay", cfg.delay.String())
	}
	switch cfg.store {
	case storePostgres:
		target = testpg.SchemaDSN(t)
		args = append(args, "--dsn", target)
	case storeSQLite:
		target = filepath.Join(dir, "payments.db")
		args = append(args, "--db", target)
	}
	srvLog := &lockedBuffer{}
	var srvs []*paymentsServer
	for range max(cfg.replicas, 1) {
		srvs = append(srvs, startPayments(ctx, t, bins.payments, srvLog, args...))
	}
	srv := srvs[0]
	upstream := srv.URL()
	if len(srvs) > 1 {
		upstream = roundRobin(t, srvs)
	}
	proxy, err := faultproxy.Start(faultproxy.Config{
		Upstream: upstream,
		Seed:     cfg.seed,
		Mode:     faultproxy.ModeKeyed,
		Rates:    cfg.rates,
		MaxDelay: 30 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })

	rng := rand.New(rand.NewPCG(cfg.seed, 0xc4a05))
	prefix := fmt.Sprintf("chaos%d", cfg.seed)
	accounts := make([]string, cfg.accounts)
	var slots []*chaosSlot
	for i := range accounts {
		accounts[i] = fmt.Sprintf("acct%d", i)
		slots = append(slots, &chaosSlot{name: accounts[i], account: accounts[i], queue: filepath.Join(dir, accounts[i]+".queue")})
	}
	slots = append(slots, &chaosSlot{name: accounts[0] + "-b", account: accounts[0], queue: slots[0].queue})
	for range cfg.clientKills {
		s := slots[rng.IntN(len(slots))]
		s.kills = append(s.kills, 150*time.Millisecond+time.Duration(rng.IntN(1000))*time.Millisecond)
	}
	// The server is killed when the proxy has seen a seeded share of the
	// run's requests, so that every kill lands while requests are in
	// flight (the clients finish a run in seconds: a kill on a timer would
	// often come after the work).
	intentsTotal := cfg.accounts * cfg.perAccount
	serverKillAt := make([]int, cfg.serverKills)
	for i := range serverKillAt {
		share := float64(i+1) / float64(cfg.serverKills+1) * (0.8 + 0.4*rng.Float64())
		serverKillAt[i] = max(int(share*float64(intentsTotal)), 1)
	}
	proxyRequests := func() int {
		n := 0
		for _, c := range proxy.Counts() {
			n += c
		}
		return n
	}

	// The clients.
	var (
		clientKills atomic.Int32
		wg          sync.WaitGroup
		errMu       sync.Mutex
		errs        []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	// The SDK processes of the second account share its queue with the
	// idemkit CLI ("run --until-done"), never killed (its lease is the
	// default two minutes). The CLI exits whenever nothing is pending, so
	// it is started again until that account's SDK process is done.
	sdkDone := make(chan struct{})
	cliRuns := 0
	if len(accounts) > 1 {
		cli := slots[1]
		wg.Add(1)
		go func() {
			defer wg.Done()
			log := &lockedBuffer{}
			for {
				select {
				case <-sdkDone:
					return
				case <-ctx.Done():
					return
				default:
				}
				cmd := exec.Command(bins.idemkit, "run", "--queue", cli.queue, "--until-done", "--concurrency", "4",
					"-H", "Authorization: Bearer "+cli.account)
				p, err := startProc(t, fmt.Sprintf("idemkit run %s#%d", cli.name, cliRuns), cmd, log)
				if err != nil {
					fail(err)
					return
				}
				err = p.wait(ctx)
				cliRuns++
				if d := os.Getenv(dumpEnv); d != "" {
					_ = os.WriteFile(filepath.Join(d, cfg.name+".cli.log"), []byte(log.String()), 0o600)
				}
				var ee *exec.ExitError
				// idemkit run exits 4 when an intent of its run expired, 3 when one failed.
				if err != nil && !(cfg.mayExpire && errors.As(err, &ee) && (ee.ExitCode() == 3 || ee.ExitCode() == 4)) {
					fail(fmt.Errorf("idemkit run: %w; stderr:\n%s", err, tail(log.String(), 3000)))
					return
				}
				pause := time.NewTimer(100 * time.Millisecond) // load, not synchronisation
				select {
				case <-pause.C:
				case <-sdkDone:
					pause.Stop()
					return
				}
			}
		}()
	}

	for i, s := range slots {
		log := &lockedBuffer{}
		spec := clientSpec{Kind: clientChaos, Queue: s.queue, URL: proxy.URL(), Account: s.account,
			Prefix: prefix, N: cfg.perAccount, Concurrency: 8, Window: cfg.window}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 1 {
				defer close(sdkDone)
			}
			for gen := 0; ; gen++ {
				p, err := startProc(t, fmt.Sprintf("client %s#%d", s.name, gen), childCmd(roleClient, spec), log)
				if err != nil {
					fail(err)
					return
				}
				if gen < len(s.kills) {
					// A seeded lifetime: load, not synchronisation.
					timer := time.NewTimer(s.kills[gen])
					select {
					case <-timer.C:
						if !p.exited() {
							p.kill()
							clientKills.Add(1)
							continue
						}
					case <-p.done:
						timer.Stop()
					case <-ctx.Done():
						timer.Stop()
					}
				}
				if err := p.wait(ctx); err != nil {
					fail(fmt.Errorf("client %s#%d: %w; stderr:\n%s", s.name, gen, err, tail(log.String(), 3000)))
				}
				return
			}
		}()
	}

	// The server killer.
	clientsDone := make(chan struct{})
	killerDone := make(chan struct{})
	var serverKills int
	go func() {
		defer close(killerDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for _, at := range serverKillAt {
			for proxyRequests() < at {
				select {
				case <-tick.C:
				case <-clientsDone:
					return
				case <-ctx.Done():
					return
				}
			}
			if err := srvs[serverKills%len(srvs)].restart(ctx); err != nil {
				fail(fmt.Errorf("restart server: %w", err))
				return
			}
			serverKills++
		}
	}()
	wg.Wait()
	close(clientsDone)
	<-killerDone
	elapsed := time.Since(started)
	require.Empty(t, errs, "client or server processes failed")
	require.NoError(t, ctx.Err(), "the run did not finish in time")

	// What the queues say.
	type intentView struct {
		account string
		index   int
		in      *idemkit.Intent
	}
	intents := map[string]*intentView{} // by key
	expected := map[string]int{}        // key -> index
	for _, a := range accounts {
		for i := range cfg.perAccount {
			expected[intentKey(prefix, a, i)] = i
		}
	}
	queueReplays := 0
	for _, s := range slots[:len(accounts)] {
		c, err := idemkit.Open(ctx, s.queue, nil)
		require.NoError(t, err)
		all, err := c.List(ctx, &idemkit.ListOptions{Limit: 1_000_000})
		require.NoError(t, err)
		require.NoError(t, c.Close())
		require.Len(t, all, cfg.perAccount, "queue %s: every intent is there once (none lost)", s.queue)
		for _, in := range all {
			i, ok := expected[in.Key]
			require.True(t, ok, "queue %s holds an intent with an unexpected key %q", s.queue, in.Key)
			require.True(t, strings.HasPrefix(in.Key, prefix+"-"+s.account+"-"), "key %s in the queue of %s", in.Key, s.account)
			require.NotContains(t, intents, in.Key, "key %s queued twice", in.Key)
			intents[in.Key] = &intentView{account: s.account, index: i, in: in}
			if in.Outcome != nil && in.Outcome.Replayed {
				queueReplays++
			}
		}
	}
	require.Len(t, intents, len(expected))

	// What the ledger says.
	insp := openInspector(t, cfg.store, target)
	rows, err := insp.payments(ctx)
	require.NoError(t, err)
	byKey := map[string][]ledgerRow{}
	for _, r := range rows {
		iv, ok := intents[r.Key]
		require.True(t, ok, "payment %s (account %s, key %q) has no intent", r.ID, r.Account, r.Key)
		require.Equal(t, iv.account, r.Account, "payment %s for key %s belongs to the intent's account", r.ID, r.Key)
		byKey[r.Key] = append(byKey[r.Key], r)
	}

	// What the server's log says: how often each key was executed and
	// replayed, over every generation.
	executed, replays, takeovers := serverOutcomes(srvLog.String())
	if d := os.Getenv(dumpEnv); d != "" {
		_ = os.WriteFile(filepath.Join(d, cfg.name+".server.log"), []byte(srvLog.String()), 0o600)
	}

	var bad []string
	succeeded, expired := 0, 0
	for key, iv := range intents {
		in := iv.in
		got := byKey[key]
		if executed[key] > 1 && cfg.mode == "transactional" {
			bad = append(bad, fmt.Sprintf("%s: executed %d times", key, executed[key]))
		}
		if in.State == idemkit.StateExpired && cfg.mayExpire {
			expired++
			if len(got) > 1 {
				bad = append(bad, fmt.Sprintf("%s: expired with %d payments", key, len(got)))
			}
			continue
		}
		if in.State != idemkit.StateSucceeded {
			bad = append(bad, fmt.Sprintf("%s: %s after %d attempt(s): %s", key, in.State, in.Attempts, in.LastError))
			continue
		}
		succeeded++
		if len(got) != 1 {
			bad = append(bad, fmt.Sprintf("%s: succeeded with %d payments", key, len(got)))
			continue
		}
		var p apiPayment
		if err := json.Unmarshal(in.Outcome.Body, &p); err != nil || in.Outcome.Status != 201 {
			bad = append(bad, fmt.Sprintf("%s: outcome %d %q", key, in.Outcome.Status, in.Outcome.Body))
			continue
		}
		r := got[0]
		if p.ID != r.ID || r.Description != key || r.Amount != int64(intentAmount(iv.index)) || p.Account != iv.account {
			bad = append(bad, fmt.Sprintf("%s: the client recorded payment %+v, the ledger holds %+v", key, p, r))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Logf("proxy log of the first bad key:\n%s", proxyLogFor(proxy, strings.SplitN(bad[0], ":", 2)[0]))
		t.Fatalf("%d intent(s) without exactly one effect:\n%s", len(bad), strings.Join(bad[:min(len(bad), 20)], "\n"))
	}
	if !cfg.mayExpire {
		require.Len(t, rows, len(intents), "one payment per intent, none without")
	}
	require.Positive(t, succeeded)

	// No account sees another's payment.
	for _, a := range accounts {
		list, err := listPayments(ctx, srv.URL(), a)
		require.NoError(t, err)
		if !cfg.mayExpire {
			require.Len(t, list, cfg.perAccount, "GET /v1/payments as %s", a)
		}
		for _, p := range list {
			require.Equal(t, a, p.Account, "GET /v1/payments as %s lists payment %s of %s", a, p.ID, p.Account)
			require.Equal(t, a, intents[p.Description].account, "payment %s", p.ID)
		}
	}

	// The faults were real.
	counts := proxy.Counts()
	faults := 0
	for _, a := range faultproxy.Actions {
		if a != faultproxy.ActionPass {
			faults += counts[a]
		}
	}
	require.Positive(t, counts[faultproxy.ActionDropResponse], "no response was dropped")
	require.NotEmpty(t, executed, "no outcome=executed line in the server log: did its format change? (the double-execution check reads it)")
	require.Positive(t, replays, "no replay happened: the faults were not real")
	require.Positive(t, queueReplays, "no client recorded a replayed outcome")
	require.Positive(t, int(clientKills.Load()), "no client was killed")
	require.Equal(t, cfg.serverKills, serverKills, "the server was killed as planned (the run outlived the kill schedule)")

	t.Logf("chaos: store=%s mode=%s replicas=%d window=%s seed=%d intents=%d succeeded=%d expired=%d faults{drop_response=%d reset=%d unavailable=%d delay=%d slow_write=%d} kills{client=%d server=%d} cli_runs=%d replays=%d replayed_outcomes=%d takeovers=%d effects=%d requests=%d elapsed=%s",
		cfg.store, cfg.mode, len(srvs), cfg.window, cfg.seed, len(intents), succeeded, expired,
		counts[faultproxy.ActionDropResponse], counts[faultproxy.ActionReset], counts[faultproxy.ActionUnavailable],
		counts[faultproxy.ActionDelay], counts[faultproxy.ActionSlowWrite],
		clientKills.Load(), serverKills, cliRuns, replays, queueReplays, takeovers, len(rows), faults+counts[faultproxy.ActionPass],
		elapsed.Round(100*time.Millisecond))
}

// serverOutcomes counts, per key, the "outcome=executed" request lines of
// the payments server's log, all "outcome=replayed" lines and the lease
// takeovers.
func serverOutcomes(log string) (executed map[string]int, replays, takeovers int) {
	executed = map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "msg=request") {
			continue
		}
		var key, outcome string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "key="); ok {
				key = v
			}
			if v, ok := strings.CutPrefix(f, "outcome="); ok {
				outcome = v
			}
			if f == "taken_over=true" {
				takeovers++
			}
		}
		switch outcome {
		case "executed":
			executed[key]++
		case "replayed":
			replays++
		}
	}
	return executed, replays, takeovers
}

// proxyLogFor formats the proxy's records of one key.
func proxyLogFor(p *faultproxy.Proxy, key string) string {
	var b strings.Builder
	for _, r := range p.Log() {
		if r.Key == key {
			fmt.Fprintf(&b, "  seq=%d attempt=%d action=%s upstream=%d err=%q\n", r.Seq, r.Attempt, r.Action, r.UpstreamStatus, r.Err)
		}
	}
	return b.String()
}

// roundRobin starts a forwarder that sends each request to the next of
// srvs (a load balancer in front of replicas) and returns its URL. A replica
// that is down answers 502 through it, as a real balancer would.
func roundRobin(t *testing.T, srvs []*paymentsServer) string {
	t.Helper()
	var targets []*url.URL
	for _, s := range srvs {
		u, err := url.Parse(s.URL())
		require.NoError(t, err)
		targets = append(targets, u)
	}
	var n atomic.Uint64
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[n.Add(1)%uint64(len(targets))])
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	fwd := httptest.NewServer(rp)
	t.Cleanup(func() {
		fwd.Close()
		tr.CloseIdleConnections()
	})
	return fwd.URL
}
