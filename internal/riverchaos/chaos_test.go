package riverchaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/faultproxy"
	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testpg"
)

// The bounds of a run: intents, the chaos phase, the drain after it.
const (
	intents      = 48
	chaosFor     = 15 * time.Second
	drainTimeout = 60 * time.Second
)

// TestRiverChaos: three service processes share one River queue; they are
// SIGKILLed and restarted at seeded moments while intents flow to the
// payments API behind the fault proxy. Every intent ends; each succeeded
// intent paid exactly once; no intent reached the API under two keys.
func TestRiverChaos(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("IDEMKIT_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (IDEMKIT_CHAOS_SEED=%d reproduces the fault and kill schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The payments API; the keys each payment's requests carried, as it saw them.
	var mu sync.Mutex
	keysOf := map[string]map[string]bool{} // description -> keys
	serviceOf := map[string]string{}       // key -> the service of its latest attempt
	midRequest := make(chan string, 1)     // a service whose payment is being made
	charging := func(key string) {
		mu.Lock()
		name := serviceOf[key]
		mu.Unlock()
		select {
		case midRequest <- name:
		default:
		}
	}
	app, err := paymentsapi.Open(ctx, &paymentsapi.Config{
		DB: filepath.Join(t.TempDir(), "payments.db"), SweepInterval: -1,
		Delay:             200 * time.Millisecond, // each payment held: a kill can land mid-request
		OnChargeStartFunc: func(_, key string) { charging(key) },
		Logger:            discard(),
	})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	h := app.Handler()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var p struct {
			Description string `json:"description"`
		}
		_ = json.Unmarshal(body, &p)
		mu.Lock()
		if keysOf[p.Description] == nil {
			keysOf[p.Description] = map[string]bool{}
		}
		keysOf[p.Description][r.Header.Get("Idempotency-Key")] = true
		serviceOf[r.Header.Get("Idempotency-Key")] = r.Header.Get("X-Service")
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(upstream.Close)
	proxy, err := faultproxy.Start(faultproxy.Config{
		Upstream: upstream.URL, Seed: seed, Mode: faultproxy.ModeKeyed, MaxDelay: 300 * time.Millisecond,
		Rates: faultproxy.Rates{DropResponse: 0.15, Reset: 0.1, Unavailable: 0.1, Delay: 0.2},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })

	// The queue, and the submitting side (this process: insert only).
	pcfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pcfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, idemriver.Migrate(ctx, pool, ""))
	client, err := idemriver.NewClient(pool, serviceConfig("submitter"))
	require.NoError(t, err)

	// Three services.
	services := make([]*svc, 3)
	for i := range services {
		services[i] = &svc{name: fmt.Sprintf("s%d", i+1), dsn: dsn}
		require.NoError(t, services[i].start())
		t.Cleanup(services[i].kill)
	}

	// Chaos: intents submitted in waves while services are killed and
	// restarted at seeded moments.
	ids := make([]string, 0, intents)
	kills := 0
	midDone := false
	end := time.Now().Add(chaosFor)
	perWave := intents / 12
	for time.Now().Before(end) || len(ids) < intents {
		for i := 0; i < perWave && len(ids) < intents; i++ {
			body := fmt.Sprintf(`{"amount": %d, "currency": "EUR", "description": "intent %d"}`, 100+len(ids), len(ids))
			in, err := client.Submit(ctx, &idemriver.Request{URL: proxy.URL() + "/v1/payments",
				Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)})
			require.NoError(t, err)
			ids = append(ids, in.ID)
		}
		pause := time.Duration(300+rng.IntN(900)) * time.Millisecond
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(pause):
		}
		s := services[rng.IntN(len(services))]
		if !midDone {
			// One kill lands mid-request: on a service whose payment is
			// being made right now (not one signalled earlier), when one
			// starts within a short wait; else a random one, and again at
			// the next kill.
			select {
			case <-midRequest:
			default:
			}
			select {
			case name := <-midRequest:
				for _, x := range services {
					if x.name == name {
						s, midDone = x, true
					}
				}
			case <-time.After(2 * time.Second):
			}
		}
		s.kill()
		kills++
		require.NoError(t, s.start())
	}
	t.Logf("%d kills, %d intents, proxy actions %v", kills, len(ids), proxy.Counts())

	// Drain: every intent ends.
	dctx, dcancel := context.WithTimeout(ctx, drainTimeout)
	defer dcancel()
	states := map[idemriver.State]int{}
	var succeeded []*idemriver.Intent
	for _, id := range ids {
		in, err := client.Wait(dctx, id)
		require.NotNil(t, in, "intent %s: %v", id, err)
		require.NotEqual(t, idemriver.StatePending, in.State, "intent %s still pending after the drain: %s", id, in.LastError)
		states[in.State]++
		if in.State == idemriver.StateSucceeded {
			succeeded = append(succeeded, in)
		}
	}
	var takenOver int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE array_to_string(errors::text[], ' ') LIKE '%worker gone%'`).Scan(&takenOver))
	t.Logf("states %v; %d intents taken over from a killed service", states, takenOver)
	if midDone {
		require.Positive(t, takenOver, "the mid-request kill left an intent to take over")
	} else {
		t.Log("no kill landed mid-request in this run (no payment started within the waits)")
	}

	// The ledger: one payment per succeeded intent, none twice; one key per intent.
	payments, err := app.Payments(ctx, "shop")
	require.NoError(t, err)
	paid := map[string]int{}
	for _, p := range payments {
		paid[p.Description]++
	}
	for desc, n := range paid {
		require.Equal(t, 1, n, "%s paid %d times", desc, n)
	}
	for _, in := range succeeded {
		var p struct {
			Description string `json:"description"`
		}
		require.NoError(t, json.Unmarshal(in.Body, &p))
		require.Equal(t, 1, paid[p.Description], "succeeded intent %s (%s) paid %d times", in.ID, p.Description, paid[p.Description])
		mu.Lock()
		keys := keysOf[p.Description]
		mu.Unlock()
		require.Equal(t, map[string]bool{in.Key: true}, keys, "intent %s reached the API under these keys", in.ID)
	}
	mu.Lock()
	for desc, keys := range keysOf {
		require.Len(t, keys, 1, "%s reached the API under %d keys", desc, len(keys))
	}
	mu.Unlock()
	require.Equal(t, len(ids), states[idemriver.StateSucceeded], "every intent succeeds: the faults are all retryable (%v)", states)
	require.Len(t, payments, len(succeeded), "one payment per succeeded intent, and no other")
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// svc is one service process.
type svc struct {
	name, dsn string
	cmd       *exec.Cmd
	done      chan struct{}
}

func (s *svc) start() error {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serviceEnv+"="+s.name, dsnEnv+"="+s.dsn)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.done)
	return nil
}

// kill SIGKILLs the process and waits for it to be gone.
func (s *svc) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}
