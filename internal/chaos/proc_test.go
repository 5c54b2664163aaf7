package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// proc is a child process whose stdout lines the test can wait for. Every
// proc is SIGKILLed (if still running) and reaped in t.Cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced at every new line and at exit

	done    chan struct{} // closed once the process has been reaped
	waitErr error         // valid after done
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// mustStart is startProc for the test goroutine: it fails the test if the
// process cannot be started.
func mustStart(t *testing.T, name string, cmd *exec.Cmd, stderr io.Writer) *proc {
	t.Helper()
	p, err := startProc(t, name, cmd, stderr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startProc starts cmd with stderr going to stderr (which may be nil) and
// collects its stdout lines. It may be called from any goroutine.
func startProc(t *testing.T, name string, cmd *exec.Cmd, stderr io.Writer) (*proc, error) {
	p := &proc{name: name, cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.waitErr = cmd.Wait()
		close(p.done)
		p.mu.Lock()
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}()
	t.Cleanup(p.kill)
	return p, nil
}

// kill SIGKILLs the process (if it is still running) and waits until it
// has been reaped. It is safe to call more than once.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit by itself and returns its error.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.waitErr
	case <-ctx.Done():
		return fmt.Errorf("%s still running: %w", p.name, ctx.Err())
	}
}

// waitLine returns the first stdout line with the given prefix, waiting for
// it until ctx ends or the process exits.
func (p *proc) waitLine(ctx context.Context, prefix string) (string, error) {
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return l, nil
			}
		}
		ch := p.changed
		p.mu.Unlock()
		if p.exited() {
			// The reader appended every line before done was closed.
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, l := range p.lines {
				if strings.HasPrefix(l, prefix) {
					return l, nil
				}
			}
			return "", fmt.Errorf("%s exited (%v) without printing %q", p.name, p.waitErr, prefix)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("%s: no %q line: %w", p.name, prefix, ctx.Err())
		}
	}
}

// errNoListen is returned when a server exits before listening.
var errNoListen = errors.New("server exited before listening")

// listenURL waits for the "listening on http://..." line of a server
// process and returns the URL.
func (p *proc) listenURL(ctx context.Context) (string, error) {
	l, err := p.waitLine(ctx, "listening on ")
	if err != nil {
		if p.exited() {
			return "", fmt.Errorf("%w: %v", errNoListen, err)
		}
		return "", err
	}
	return strings.TrimPrefix(l, "listening on "), nil
}

// deadline returns a context that ends after d or with the test.
func deadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
