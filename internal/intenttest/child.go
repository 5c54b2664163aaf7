package intenttest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// childEnv carries a worker process's queue location and options (JSON).
const childEnv = "IDEMKIT_INTENTTEST_CHILD"

type childSpec struct {
	Location string
	Options  Options
}

// Child is the body of the backend's child test (Backend.ChildTest): in a
// worker process started by the takeover case, it reopens the queue and works
// it until the process is killed. In a normal test run it returns at once.
func Child(t *testing.T, b Backend) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		t.Log("not a worker process: nothing to do (the takeover case starts this test in a child process)")
		return
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatalf("child spec: %v", err)
	}
	ctx := context.Background()
	q, err := b.Reopen(ctx, spec.Location, spec.Options)
	if err != nil {
		t.Fatalf("reopen %s: %v", spec.Location, err)
	}
	_ = q.Work(ctx) // until SIGKILL
	select {}
}

// worker is a worker process on a queue.
type worker struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// spawn starts a worker process on q's queue (the test binary re-executed
// to run b.ChildTest). It is killed when the test ends, if still running.
func spawn(t *testing.T, b Backend, q Queue, o Options) *worker {
	t.Helper()
	spec, err := json.Marshal(childSpec{Location: q.Location(), Options: o})
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^"+b.ChildTest+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	w := &worker{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(w.kill)
	return w
}

// kill SIGKILLs the worker process and waits for it to be gone.
func (w *worker) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
	}
}
