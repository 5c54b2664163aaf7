package idemkit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// Child processes: multi-process tests re-execute the test binary with
// childRoleEnv set; TestMain then runs childMain instead of the tests.
const (
	childRoleEnv   = "IDEMKIT_TEST_CHILD"
	childQueueEnv  = "IDEMKIT_TEST_QUEUE"
	childServerEnv = "IDEMKIT_TEST_SERVER"
	childNameEnv   = "IDEMKIT_TEST_NAME"
	childKeyEnv    = "IDEMKIT_TEST_KEY"
	// childLeaseEnv, if set, is the child's LeaseDuration (its
	// AttemptTimeout is half of it).
	childLeaseEnv = "IDEMKIT_TEST_LEASE"
	// childKillAtEnv, if set, is an EventKind at which the child SIGKILLs
	// itself (from Config.OnEventFunc, on the attempt's goroutine).
	childKillAtEnv = "IDEMKIT_TEST_KILL_AT"
	// childPerHourEnv, if set, is the child's MaxAttemptsPerHour.
	childPerHourEnv = "IDEMKIT_TEST_PER_HOUR"
)

// childConfig is the Config of child processes: short leases, so that a
// takeover after a kill happens within seconds even where the holder's
// death is not detected, unless childLeaseEnv sets a long one.
func childConfig(name string) *Config {
	cfg := &Config{
		Backoff:        fastBackoff,
		LeaseDuration:  3 * time.Second,
		AttemptTimeout: 2 * time.Second,
		pollInterval:   20 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer child")
			r.Header.Set("X-Child", name)
			return nil
		},
	}
	if at := EventKind(os.Getenv(childKillAtEnv)); at != "" {
		cfg.OnEventFunc = func(e Event) {
			if e.Kind == at {
				if p, err := os.FindProcess(os.Getpid()); err == nil {
					_ = p.Kill() // SIGKILL on Unix
				}
				select {} // the signal is on its way
			}
		}
	}
	if n, err := strconv.Atoi(os.Getenv(childPerHourEnv)); err == nil {
		cfg.MaxAttemptsPerHour = n
	}
	if d, err := time.ParseDuration(os.Getenv(childLeaseEnv)); err == nil {
		cfg.LeaseDuration, cfg.AttemptTimeout = d, d/2
	}
	return cfg
}

func childMain(role string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	name := os.Getenv(childNameEnv)
	c, err := Open(ctx, os.Getenv(childQueueEnv), childConfig(name))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer c.Close()
	switch role {
	case "run":
		// Wait for the sibling, then drain the queue.
		resp, err := http.Get(os.Getenv(childServerEnv) + "/ready?child=" + name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		resp.Body.Close()
		return runUntilDone(ctx, c)
	case "resume":
		return runUntilDone(ctx, c)
	case "do":
		_, err := c.Do(ctx, &Request{URL: os.Getenv(childServerEnv) + "/charges", Key: os.Getenv(childKeyEnv),
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"amount":4000}`)})
		fmt.Fprintln(os.Stderr, "child: Do returned (it should have been killed):", err)
		return 3
	}
	return 2
}

func runUntilDone(ctx context.Context, c *Client) int {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for {
		pending, err := c.List(ctx, &ListOptions{State: StatePending, Limit: 1})
		if err != nil || len(pending) == 0 || ctx.Err() != nil {
			cancel()
			<-done
			if err != nil || ctx.Err() == context.DeadlineExceeded {
				fmt.Fprintln(os.Stderr, "child:", err, ctx.Err())
				return 1
			}
			return 0
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func startChild(t *testing.T, role, name, queue, server string, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childQueueEnv+"="+queue,
		childServerEnv+"="+server, childNameEnv+"="+name)
	cmd.Env = append(cmd.Env, extra...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("child %s stderr:\n%s", name, stderr.String())
		}
	})
	return cmd
}

// TestMultiProcess_NeverInFlightTwice: two processes drain one queue. No
// intent is ever in flight twice at once, and every intent ends.
func TestMultiProcess_NeverInFlightTwice(t *testing.T) {
	t.Parallel()
	const n = 200
	var (
		mu        sync.Mutex
		inflight  = map[string]int{}
		successes = map[string]int{}
		byChild   = map[string]int{}
		overlaps  atomic.Int32
		ready     sync.WaitGroup
		requests  atomic.Int32
	)
	ready.Add(2)
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" {
			ready.Done()
			ready.Wait()
			return
		}
		key := r.Header.Get("Idempotency-Key")
		nreq := requests.Add(1)
		mu.Lock()
		inflight[key]++
		if inflight[key] > 1 {
			overlaps.Add(1)
		}
		byChild[r.Header.Get("X-Child")]++
		mu.Unlock()
		// Simulated work, so that attempts of the two processes overlap.
		work := time.NewTimer(time.Duration(nreq%7) * time.Millisecond)
		<-work.C
		status := http.StatusOK
		if nreq%5 == 0 {
			status = http.StatusServiceUnavailable
		}
		mu.Lock()
		inflight[key]--
		if status == http.StatusOK {
			successes[key]++
		}
		mu.Unlock()
		w.WriteHeader(status)
	}))
	ctx := testkit.Ctx(t)
	for i := 0; i < n; i++ {
		_, err := b.c.Submit(ctx, &Request{URL: fmt.Sprintf("%s/i/%d", b.srv.URL, i)})
		require.NoError(t, err)
	}
	// Both children live: no lease may lapse, so a long lease (a 3 s lease can
	// lapse under CPU load between an answer and its recorded outcome, and the
	// other child then sends the same key again, which is what leases allow).
	c1 := startChild(t, "run", "one", b.path, b.srv.URL, childLeaseEnv+"=60s")
	c2 := startChild(t, "run", "two", b.path, b.srv.URL, childLeaseEnv+"=60s")
	require.NoError(t, c1.Wait())
	require.NoError(t, c2.Wait())

	require.Zero(t, overlaps.Load(), "an intent was in flight twice at once")
	counts, err := b.c.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StateSucceeded: n}, counts)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, successes, n)
	for k, v := range successes {
		require.Equal(t, 1, v, "key %s succeeded %d times", k, v)
	}
	t.Logf("requests per process: %v", byChild)
	require.Positive(t, byChild["one"], "both processes worked: %v", byChild)
	require.Positive(t, byChild["two"], "both processes worked: %v", byChild)
}
