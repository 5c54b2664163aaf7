package main

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/internal/paymentsapi"
)

// childEnv makes the test binary run the agent (the test's child
// processes are this binary re-executed).
const childEnv = "IDEMKIT_AGENT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(testdb.Report(m))
}

// agentProc is one agent child process and the lines it printed.
type agentProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p := &agentProc{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range p.lines {
		}
		<-p.done
	})
	return p
}

// waitLine waits for a line containing s.
func (p *agentProc) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			require.True(t, ok, "the agent exited before printing %q", s)
			if strings.Contains(line, s) {
				return
			}
		case <-timeout.C:
			t.Fatalf("no line with %q", s)
		}
	}
}

// kill SIGKILLs the agent and waits for it to be gone.
func (p *agentProc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	go func() {
		for range p.lines {
		}
	}()
	err := <-p.done
	p.done <- err // for the cleanup
	require.Error(t, err, "killed")
}

// TestAgent_OfflineKilledAndRestartedChargesOnce: the agent queues its
// payments while the API is down and is SIGKILLed; the API comes up; a
// restarted agent is SIGKILLed while a payment is in flight; a third one
// drains the queue and exits 0. Every payment took effect exactly once.
func TestAgent_OfflineKilledAndRestartedChargesOnce(t *testing.T) {
	const orders = 4
	queue := filepath.Join(t.TempDir(), "agent.db")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // the API is down: connection refused
	args := []string{"--queue", queue, "--api", "http://" + addr, "--orders", fmt.Sprint(orders)}

	// 1. Offline: the payments are queued and retried, then the agent dies.
	first := startAgent(t, args...)
	first.waitLine(t, fmt.Sprintf("order %d queued", orders))
	first.waitLine(t, "connection refused")
	first.kill(t)

	// 2. The API comes up on that address; a charge takes 500ms.
	started := make(chan string, 64)
	app, err := paymentsapi.Open(context.Background(), &paymentsapi.Config{
		DB: filepath.Join(t.TempDir(), "payments.db"), Delay: 500 * time.Millisecond, SweepInterval: -1,
		Logger:            slog.New(slog.DiscardHandler),
		OnChargeStartFunc: func(_, key string) { started <- key },
	})
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(app.Handler())
	l, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		app.Close()
	})

	// 3. A restarted agent dies with a payment in flight.
	second := startAgent(t, args...)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no charge started")
	}
	second.kill(t)

	// 4. A third agent drains the queue.
	third := startAgent(t, args...)
	third.waitLine(t, fmt.Sprintf("drained: %d succeeded", orders))
	go func() {
		for range third.lines {
		}
	}()
	require.NoError(t, <-third.done)
	third.done <- nil

	payments, err := app.Payments(context.Background(), "alice")
	require.NoError(t, err)
	require.Len(t, payments, orders, "exactly one payment per order")
	descs := map[string]int{}
	for _, p := range payments {
		descs[p.Description]++
	}
	for i := 1; i <= orders; i++ {
		require.Equal(t, 1, descs[fmt.Sprintf("order %d", i)], "order %d", i)
	}
}

// TestAgent_KilledMidPaymentResumesAtOnce: the agent is SIGKILLed while
// its payments are in flight (one, then four); restarted, Drain takes the
// dead agent's intents over at once instead of returning with them
// pending for the rest of the lease: every order succeeds, once.
func TestAgent_KilledMidPaymentResumesAtOnce(t *testing.T) {
	for _, orders := range []int{1, 4} {
		t.Run(fmt.Sprint(orders), func(t *testing.T) {
			started := make(chan string, 64)
			app, err := paymentsapi.Open(context.Background(), &paymentsapi.Config{
				DB: filepath.Join(t.TempDir(), "payments.db"), Delay: 3 * time.Second, SweepInterval: -1,
				Logger:            slog.New(slog.DiscardHandler),
				OnChargeStartFunc: func(_, key string) { started <- key },
			})
			require.NoError(t, err)
			srv := httptest.NewServer(app.Handler())
			t.Cleanup(func() {
				srv.Close()
				app.Close()
			})
			args := []string{"--queue", filepath.Join(t.TempDir(), "agent.db"), "--api", srv.URL, "--orders", fmt.Sprint(orders)}

			first := startAgent(t, args...)
			for range orders {
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("the charges did not all start")
				}
			}
			first.kill(t)

			second := startAgent(t, args...)
			second.waitLine(t, "drained:")
			go func() {
				for range second.lines {
				}
			}()
			require.NoError(t, <-second.done, "the restarted agent gets every payment through")
			second.done <- nil
			payments, err := app.Payments(context.Background(), "alice")
			require.NoError(t, err)
			require.Len(t, payments, orders, "one payment per order")
		})
	}
}
