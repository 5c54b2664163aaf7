package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/paymentsapi"
)

const (
	// demoTimeout bounds the whole demo; it normally takes about 10 s.
	demoTimeout = 60 * time.Second
	// startTimeout bounds the start of a child and its first report.
	startTimeout = 20 * time.Second
	// ledgerTimeout bounds the wait for a charge to show in the ledger.
	ledgerTimeout = 15 * time.Second
	// ledgerPollInterval is how often the ledger is read meanwhile.
	ledgerPollInterval = 200 * time.Millisecond
)

// demo is one run of the kill-and-resume scenario.
type demo struct {
	o      options
	tl     *timeline
	exe    string
	dir    string
	kids   *children
	httpc  *http.Client
	url    string // the payments API
	server *child
	t0     time.Time
	// The accounts paying, one per client, unique to this run: a
	// PostgreSQL database given with --dsn may hold earlier runs' payments.
	alice, bob string
}

// runDemo runs the demo and prints its timeline on stdout. It returns nil
// only if the idemkit client charged exactly once.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	d := &demo{
		o:     o,
		tl:    newTimeline(stdout),
		exe:   exe,
		kids:  &children{stop: make(chan struct{})},
		httpc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second},
	}
	d.t0 = d.tl.t0
	run := uuid.NewString()[:6]
	d.alice, d.bob = "alice-"+run, "bob-"+run
	d.dir, err = os.MkdirTemp("", "idemkit-killresume-")
	if err != nil {
		return err
	}
	interrupted := ctx
	defer func() {
		err = errors.Join(err, d.cleanup(interrupted))
		d.tl.close()
	}()

	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()

	d.tl.plain("idemkit kill-and-resume demo: a client process is killed (SIGKILL) while its 40.00 USD payment is in flight.")
	d.tl.plain("temp dir: %s (payments database and client queue)", d.dir)

	if err := d.startServer(ctx); err != nil {
		return err
	}
	idem, err := d.idemkitScenario(ctx)
	if err != nil {
		return err
	}
	naive, err := d.naiveScenario(ctx)
	if err != nil {
		return err
	}

	d.tl.section("Result")
	d.tl.plain("  idemkit client (%s): %s", d.alice, chargeCount(idem))
	d.tl.plain("  naive client   (%s): %s", d.bob, chargeCount(naive))
	if len(idem) != 1 {
		d.tl.plain("VERDICT: FAIL: idemkit charged %d times (%s); naive client charged %d times", len(idem), chargeCount(idem), len(naive))
		return &exitError{code: 1}
	}
	d.tl.plain("VERDICT: idemkit charged exactly once (1 payment); naive client charged %d %s", len(naive), plural(len(naive), "time", "times"))
	return nil
}

// startServer starts the payments API and waits for its address.
func (d *demo) startServer(ctx context.Context) error {
	backend := "embedded SQLite " + filepath.Join(d.dir, "payments.db")
	args := []string{"--delay", d.o.delay.String()}
	if paymentsapi.IsRedisDSN(d.o.dsn) {
		// Redis keeps the idempotency records; the ledger stays in SQLite.
		backend = "Redis, ledger in " + backend
		args = append(args, "--dsn", d.o.dsn, "--db", filepath.Join(d.dir, "payments.db"))
	} else if d.o.dsn != "" {
		backend = "PostgreSQL"
		if strings.HasPrefix(d.o.dsn, "mysql://") || strings.HasPrefix(d.o.dsn, "mariadb://") {
			backend = "MySQL/MariaDB"
		}
		args = append(args, "--dsn", d.o.dsn)
	} else {
		args = append(args, "--db", filepath.Join(d.dir, "payments.db"))
	}
	d.tl.section("1. Start the payments API (%s); every payment handler takes %v", backend, d.o.delay)
	srv, err := d.kids.start(d.tl, d.exe, "server", roleServer, d.o.verbose, args...)
	if err != nil {
		return err
	}
	ev, err := srv.await(ctx, evListening, nil, startTimeout)
	if err != nil {
		return err
	}
	d.url = ev.URL
	d.server = srv
	return nil
}

// idemkitScenario pays with the idemkit client, kills it mid-flight,
// restarts it, and returns the account's ledger.
func (d *demo) idemkitScenario(ctx context.Context) ([]paymentsapi.Payment, error) {
	queue := filepath.Join(d.dir, "queue.db")
	args := []string{"--queue", queue, "--url", d.url, "--account", d.alice,
		"--t0", strconv.FormatInt(d.t0.UnixNano(), 10)}
	if d.o.verbose {
		args = append(args, "--verbose")
	}

	d.tl.section("2. %s pays 40.00 USD with the idemkit client (a fresh queue file: %s)", d.alice, filepath.Base(queue))
	first, err := d.kids.start(d.tl, d.exe, "client", roleClient, d.o.verbose, args...)
	if err != nil {
		return nil, err
	}
	persisted, err := first.await(ctx, evPersisted, nil, startTimeout)
	if err != nil {
		return nil, err
	}
	if _, err := d.server.await(ctx, evChargeStart, func(ev event) bool { return ev.Key == persisted.Key }, startTimeout); err != nil {
		return nil, err
	}

	d.tl.section("3. SIGKILL the client while its request is in flight")
	d.tl.sayf("demo", "kill -9 client (pid %d): the server is inside the payment handler, the client waits for the answer", first.pid())
	if err := first.kill(); err != nil {
		return nil, err
	}
	d.tl.sayf("demo", "client is gone (%v); it never saw an answer", first.err)
	if err := d.inspectQueue(ctx, queue, persisted); err != nil {
		return nil, err
	}

	d.tl.section("4. Restart the client on the same queue, right away")
	second, err := d.kids.start(d.tl, d.exe, "client", roleClient, d.o.verbose, args...)
	if err != nil {
		return nil, err
	}
	// Meanwhile, watch the ledger: the server finishes the killed client's
	// charge anyway.
	ledgerCh := make(chan error, 1)
	go func() {
		ps, err := d.awaitPayments(ctx, d.alice, 1)
		if err == nil {
			d.tl.sayf("demo", "GET /v1/payments (%s): %s is in the ledger: the server finished the charge although its client was dead", d.alice, ps[0].ID)
		}
		ledgerCh <- err
	}()
	done, err := second.await(ctx, evDone, nil, 2*clientTimeout)
	if err != nil {
		return nil, err
	}
	if err := second.wait(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	if err := <-ledgerCh; err != nil {
		return nil, err
	}
	if done.Key != persisted.Key {
		return nil, fmt.Errorf("the restarted client finished key %s, want the persisted key %s", done.Key, persisted.Key)
	}

	d.tl.section("5. The ledger of %s", d.alice)
	ps, err := d.payments(ctx, d.alice)
	if err != nil {
		return nil, err
	}
	d.printLedger(d.alice, ps)
	if len(ps) == 1 && done.Payment == ps[0].ID && done.Replayed {
		d.tl.plain("  one charge: the restarted client got the stored response (Idempotent-Replayed: true) of the payment its killed predecessor started")
	}
	return ps, nil
}

// inspectQueue opens the killed client's queue with the SDK and shows that
// the intent is still pending without an outcome.
func (d *demo) inspectQueue(ctx context.Context, path string, persisted event) error {
	c, err := idemkit.Open(ctx, path, nil)
	if err != nil {
		return fmt.Errorf("open the killed client's queue: %w", err)
	}
	defer c.Close()
	in, err := c.Get(ctx, persisted.Intent)
	if err != nil {
		return fmt.Errorf("the killed client's intent: %w", err)
	}
	all, err := c.List(ctx, nil)
	if err != nil {
		return err
	}
	outcome := "no outcome"
	if in.Outcome != nil {
		outcome = fmt.Sprintf("outcome %d", in.Outcome.Status)
	}
	d.tl.sayf("demo", "the queue file (read with idemkit.Open + Get, nothing sent) holds %d intent: %s, key %s, %s, %d attempt, %s",
		len(all), in.ID, in.Key, in.State, in.Attempts, outcome)
	if in.State != idemkit.StatePending || in.Outcome != nil {
		return fmt.Errorf("the killed client's intent is %s with %s, want pending without an outcome", in.State, outcome)
	}
	return nil
}

// naiveScenario is the same story with the naive client.
func (d *demo) naiveScenario(ctx context.Context) ([]paymentsapi.Payment, error) {
	args := []string{"--url", d.url, "--account", d.bob, "--t0", strconv.FormatInt(d.t0.UnixNano(), 10)}
	d.tl.section("6. The same with a naive client (plain net/http, a NEW key per attempt): %s pays 40.00 USD", d.bob)
	first, err := d.kids.start(d.tl, d.exe, "naive", roleNaive, d.o.verbose, args...)
	if err != nil {
		return nil, err
	}
	if _, err := d.server.await(ctx, evChargeStart, func(ev event) bool { return ev.Account == d.bob }, startTimeout); err != nil {
		return nil, err
	}
	d.tl.sayf("demo", "kill -9 naive (pid %d) while its request is in flight", first.pid())
	if err := first.kill(); err != nil {
		return nil, err
	}
	d.tl.sayf("demo", "naive is gone (%v); restart it", first.err)
	second, err := d.kids.start(d.tl, d.exe, "naive", roleNaive, d.o.verbose, args...)
	if err != nil {
		return nil, err
	}
	if _, err := second.await(ctx, evDone, nil, 2*clientTimeout); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		// Not the demo's failure: the naive client's.
		d.tl.sayf("demo", "the naive client gave up: %v", firstLine(err.Error()))
	}
	if err := second.wait(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	// The killed attempt's charge commits on its own schedule: give it time.
	ps, err := d.awaitPayments(ctx, d.bob, 2)
	if err != nil && !errors.Is(err, errTooFewPayments) {
		return nil, err
	}
	d.tl.section("7. The ledger of %s", d.bob)
	d.printLedger(d.bob, ps)
	if len(ps) > 1 {
		d.tl.plain("  %d charges for one purchase: the restarted naive client could not know its first request went through", len(ps))
	}
	return ps, nil
}

func (d *demo) printLedger(account string, ps []paymentsapi.Payment) {
	d.tl.plain("  GET /v1/payments (Authorization: Bearer %s): %s", account, chargeCount(ps))
	for _, p := range ps {
		d.tl.plain("    %s  %d.%02d %s  %s  created %s", p.ID, p.Amount/100, p.Amount%100, p.Currency, p.Description, p.CreatedAt.Format("2006-01-02 15:04:05.000Z07:00"))
	}
}

// errTooFewPayments is returned by awaitPayments at its deadline.
var errTooFewPayments = errors.New("too few payments")

// awaitPayments polls the account's ledger until it holds at least n
// payments, at most ledgerTimeout, and returns the last ledger read.
func (d *demo) awaitPayments(ctx context.Context, account string, n int) ([]paymentsapi.Payment, error) {
	deadline := time.Now().Add(ledgerTimeout)
	for {
		ps, err := d.payments(ctx, account)
		if err != nil {
			return nil, err
		}
		if len(ps) >= n {
			return ps, nil
		}
		if time.Now().After(deadline) {
			return ps, fmt.Errorf("%w: %s has %d payment(s) after %v, want %d", errTooFewPayments, account, len(ps), ledgerTimeout, n)
		}
		t := time.NewTimer(ledgerPollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// payments is GET /v1/payments for account.
func (d *demo) payments(ctx context.Context, account string) ([]paymentsapi.Payment, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/v1/payments", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+account)
	resp, err := d.httpc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /v1/payments: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET /v1/payments: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/payments: %d: %s", resp.StatusCode, body)
	}
	var out struct {
		Payments []paymentsapi.Payment `json:"payments"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("GET /v1/payments: %w", err)
	}
	return out.Payments, nil
}

// cleanup stops every child still running and removes the temp dir (unless
// --keep). It runs on every exit path, Ctrl-C included.
func (d *demo) cleanup(ctx context.Context) error {
	stopped, err := d.kids.cleanup()
	d.httpc.CloseIdleConnections()
	var what []string
	if len(stopped) > 0 {
		what = append(what, "stopped "+strings.Join(stopped, ", "))
	}
	if d.o.keep {
		what = append(what, "kept "+d.dir)
	} else if rerr := os.RemoveAll(d.dir); rerr != nil {
		err = errors.Join(err, rerr)
	} else {
		what = append(what, "removed "+d.dir)
	}
	if ctx.Err() != nil {
		what = append([]string{"interrupted"}, what...)
	}
	d.tl.sayf("demo", "cleanup: %s", strings.Join(what, "; "))
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func chargeCount(ps []paymentsapi.Payment) string {
	return fmt.Sprintf("%d %s", len(ps), plural(len(ps), "payment", "payments"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
