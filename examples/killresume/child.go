package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// child is a child process of the demo: this binary in another role.
type child struct {
	name   string
	cmd    *exec.Cmd
	events chan event    // what it reported, in order
	done   chan struct{} // closed once it exited and its output was read
	err    error         // cmd.Wait's, set before done is closed
	stderr *logWriter
}

// children tracks every child the demo started, for cleanup.
type children struct {
	mu   sync.Mutex
	all  []*child
	stop chan struct{} // closed at cleanup: readers drop events from then on
}

// start starts this binary in role with args, narrating on tl whatever it
// reports.
func (cs *children) start(tl *timeline, exe, name, role string, verbose bool, args ...string) (*child, error) {
	c := &child{name: name, events: make(chan event, 64), done: make(chan struct{})}
	c.stderr = &logWriter{}
	if verbose {
		c.stderr.relay = func(line string) { tl.say(name+"~", line) }
	}
	c.cmd = exec.Command(exe, args...)
	c.cmd.Env = append(os.Environ(), roleEnv+"="+role)
	c.cmd.Stderr = c.stderr
	prepareChild(c.cmd)
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cs.mu.Lock()
	cs.all = append(cs.all, c)
	cs.mu.Unlock()

	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Kind == "" {
				ev = event{Kind: evInfo, Text: sc.Text()}
			}
			if ev.Text != "" {
				at := time.Now()
				if ev.At != 0 {
					at = time.Unix(0, ev.At)
				}
				tl.sayAt(at, name, ev.Text)
			}
			select {
			case c.events <- ev:
			case <-cs.stop:
			}
		}
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// pid returns the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// errChildExited is returned by await when the child exits first.
var errChildExited = errors.New("exited")

// await returns the first event of the given kind that match accepts
// (match may be nil), skipping others. It fails when the child exits
// first, after timeout, or when ctx ends.
func (c *child) await(ctx context.Context, kind string, match func(event) bool, timeout time.Duration) (event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	accept := func(ev event) bool { return ev.Kind == kind && (match == nil || match(ev)) }
	for {
		select {
		case ev := <-c.events:
			if accept(ev) {
				return ev, nil
			}
		case <-c.done:
			for {
				select {
				case ev := <-c.events:
					if accept(ev) {
						return ev, nil
					}
				default:
					return event{}, fmt.Errorf("%s %w (%v) before reporting %q; its stderr:\n%s", c.name, errChildExited, c.err, kind, c.stderr)
				}
			}
		case <-t.C:
			return event{}, fmt.Errorf("%s did not report %q within %v; its stderr:\n%s", c.name, kind, timeout, c.stderr)
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

// wait waits for the child to exit, at most timeout.
func (c *child) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s (pid %d) did not exit within %v", c.name, c.pid(), timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kill SIGKILLs the child and waits for it to be gone.
func (c *child) kill() error {
	if c.exited() {
		return nil
	}
	if err := killChild(c.cmd.Process); err != nil && !c.exited() {
		return fmt.Errorf("kill %s: %w", c.name, err)
	}
	return c.wait(context.Background(), 10*time.Second)
}

// terminate asks the child to stop (SIGTERM) and kills it if it has not
// within grace.
func (c *child) terminate(grace time.Duration) error {
	if c.exited() {
		return nil
	}
	if err := terminateChild(c.cmd.Process); err == nil {
		if c.wait(context.Background(), grace) == nil {
			return nil
		}
	}
	return c.kill()
}

// cleanup stops every child still running: SIGTERM for a graceful stop
// first, then SIGKILL. It returns the names of those it had to stop.
func (cs *children) cleanup() ([]string, error) {
	cs.mu.Lock()
	all := append([]*child(nil), cs.all...)
	cs.mu.Unlock()
	close(cs.stop)
	var stopped []string
	var errs []error
	for _, c := range all {
		if c.exited() {
			continue
		}
		stopped = append(stopped, fmt.Sprintf("%s (pid %d)", c.name, c.pid()))
		errs = append(errs, c.terminate(5*time.Second))
	}
	return stopped, errors.Join(errs...)
}
