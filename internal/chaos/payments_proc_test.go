package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// paymentsServer is the payments example running as a process. restart
// SIGKILLs it and starts a new one on the same port, so that a proxy in
// front of it keeps working.
type paymentsServer struct {
	t      *testing.T
	bin    string
	args   []string // without --addr
	stderr *lockedBuffer

	mu   sync.Mutex
	p    *proc
	url  string // http://127.0.0.1:PORT
	host string // 127.0.0.1:PORT
	gen  int
}

// startPayments starts the payments binary with args and --addr
// 127.0.0.1:0, and waits until it listens. Every generation's stderr goes
// to stderr.
func startPayments(ctx context.Context, t *testing.T, bin string, stderr *lockedBuffer, args ...string) *paymentsServer {
	t.Helper()
	s := &paymentsServer{t: t, bin: bin, args: args, stderr: stderr}
	if err := s.start(ctx, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *paymentsServer) start(ctx context.Context, addr string) error {
	args := append([]string{"--addr", addr}, s.args...)
	p, err := startProc(s.t, fmt.Sprintf("payments#%d", s.gen), exec.Command(s.bin, args...), s.stderr)
	if err != nil {
		return err
	}
	u, err := p.listenURL(ctx)
	if err != nil {
		p.kill()
		return fmt.Errorf("payments server: %w; stderr:\n%s", err, tail(s.stderr.String(), 2000))
	}
	pu, err := url.Parse(u)
	if err != nil {
		p.kill()
		return err
	}
	s.p, s.url, s.host = p, u, pu.Host
	return nil
}

// URL returns the server's base URL; it does not change across restarts.
func (s *paymentsServer) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// restart SIGKILLs the server and starts a new one on the same port. A
// port still held for an instant is retried until ctx ends.
func (s *paymentsServer) restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.kill()
	s.gen++
	for {
		err := s.start(ctx, s.host)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errNoListen) || ctx.Err() != nil {
			return err
		}
		// The port is not free yet (or the database is being recovered):
		// try again shortly.
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
