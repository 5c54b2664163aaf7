package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testbin"
	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/testpg"
)

func TestMain(m *testing.M) { os.Exit(testdb.Report(m).Run()) }

// Orders are written with their payment intents in one transaction and
// drained by workers in two processes; one is SIGKILLed while its payment is
// on the wire. The other takes the intent over with the same key: every
// order is paid exactly once.
func TestOutbox_KillOneWorker(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The downstream: the payments example API, its payments held 300 ms so
	// that they are on the wire long enough to kill a worker mid-request.
	var mu sync.Mutex
	workerOf := map[string]string{} // Idempotency-Key -> X-Worker of its latest attempt
	killA := make(chan string, 1)
	app, err := paymentsapi.Open(ctx, &paymentsapi.Config{
		DB: filepath.Join(t.TempDir(), "payments.db"), Delay: 300 * time.Millisecond, SweepInterval: -1,
		OnChargeStartFunc: func(_, key string) {
			mu.Lock()
			w := workerOf[key]
			mu.Unlock()
			if w == "a" {
				select {
				case killA <- key:
				default:
				}
			}
		},
	})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	h := app.Handler()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		workerOf[r.Header.Get("Idempotency-Key")] = r.Header.Get("X-Worker")
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)

	// The order endpoint's side, in this process.
	pcfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, migrate(ctx, pool))
	s, err := newShop(pool, &options{paymentsURL: api.URL, account: "shop", lease: 3 * time.Second, workers: 2})
	require.NoError(t, err)

	// Two worker processes.
	bin := testbin.Build(t, ".", t.TempDir(), "outbox")
	// start starts a worker process and returns once it is draining.
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(bin, "--role", "worker", "--dsn", dsn, "--name", name, "--payments-url", api.URL,
			"--lease", "3s", "--workers", "2")
		cmd.Stdout = os.Stderr
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stderr)
			once := false
			for sc.Scan() {
				fmt.Fprintln(os.Stderr, sc.Text())
				if !once && strings.Contains(sc.Text(), "worker draining payment intents") {
					once = true
					close(ready)
				}
			}
		}()
		select {
		case <-ready:
		case <-ctx.Done():
			t.Fatalf("worker %s never started", name)
		}
		return cmd
	}
	a := start("a")
	start("b")

	const n = 12
	orders := make([]*order, 0, n)
	for i := range n {
		o, err := s.place(ctx, int64(1000+i), "EUR")
		require.NoError(t, err)
		orders = append(orders, o)
	}

	var killedKey string
	select {
	case killedKey = <-killA:
	case <-ctx.Done():
		t.Fatal("worker a never started a payment")
	}
	require.NoError(t, a.Process.Signal(syscall.SIGKILL))

	for _, o := range orders {
		in, err := s.intents.Wait(ctx, o.PaymentIntent)
		require.NoError(t, err, "order %s", o.ID)
		require.Equal(t, idemriver.StateSucceeded, in.State)
		if in.Key == killedKey {
			require.GreaterOrEqual(t, in.Attempts, 2, "the killed worker's intent was sent again, by the other")
		}
	}

	// Every order paid exactly once, for its amount.
	payments, err := app.Payments(ctx, "shop")
	require.NoError(t, err)
	paid := map[string]int{}
	for _, p := range payments {
		paid[strings.TrimPrefix(p.Description, "order ")]++
	}
	require.Len(t, payments, n, "one payment per order")
	for _, o := range orders {
		require.Equal(t, 1, paid[o.ID], "order %s", o.ID)
	}
}
