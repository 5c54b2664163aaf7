package main

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testbin"
	"github.com/idemkit/idemkit/internal/testpg"
)

// TestOutbox_ServicesStartedTogether: the README starts the order endpoint
// and two workers at once on a database nobody migrated yet. Each process
// migrates at start; all three must come up (no "relation river_migration
// already exists" from the loser of a race), and the endpoint must answer.
func TestOutbox_ServicesStartedTogether(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := testbin.Build(t, ".", t.TempDir(), "outbox")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	type started struct {
		name string
		err  string // the process's last line, if it exited before it was ready
	}
	results := make(chan started, 3)
	start := func(name, ready string, args ...string) {
		cmd := exec.Command(bin, append([]string{"--dsn", dsn, "--payments-url", "http://127.0.0.1:1"}, args...)...)
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
		go func() {
			sc := bufio.NewScanner(stderr)
			last := ""
			for sc.Scan() {
				last = sc.Text()
				if strings.Contains(last, ready) {
					results <- started{name: name}
					for sc.Scan() { // keep draining its output
					}
					return
				}
			}
			results <- started{name: name, err: "exited before it was ready: " + last}
		}()
	}
	start("serve", "outbox: order endpoint", "--role", "serve", "--addr", addr)
	start("worker a", "worker draining payment intents", "--role", "worker", "--name", "a")
	start("worker b", "worker draining payment intents", "--role", "worker", "--name", "b")
	for range 3 {
		select {
		case r := <-results:
			require.Empty(t, r.err, r.name)
		case <-ctx.Done():
			t.Fatal("a process neither started nor exited")
		}
	}
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, time.Minute, 20*time.Millisecond, "the order endpoint listens")
}
