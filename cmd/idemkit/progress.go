package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/idemkit/idemkit"
)

// progress is the counts-by-state line of run on stderr: redrawn in place
// on a terminal, a plain line per change otherwise. Other output goes
// through println, which keeps the in-place line below it.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	last  string
	drawn bool // the in-place line is on screen
	quiet bool // no progress line (not a run)
}

func newProgress(w io.Writer, tty bool) *progress { return &progress{w: w, tty: tty} }

// countsLine is the progress text.
func countsLine(counts map[idemkit.IntentState]int) string {
	line := fmt.Sprintf("%d pending, %d succeeded, %d failed, %d expired, %d canceled",
		counts[idemkit.StatePending], counts[idemkit.StateSucceeded], counts[idemkit.StateFailed],
		counts[idemkit.StateExpired], counts[idemkit.StateCanceled])
	if n := counts[idemkit.StateUnknown]; n > 0 {
		line += fmt.Sprintf(", %d outcome unknown", n)
	}
	return line
}

// update shows line if it changed.
func (p *progress) update(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet || line == p.last {
		return
	}
	p.last = line
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kidemkit: %s", line)
		p.drawn = true
		return
	}
	fmt.Fprintf(p.w, "idemkit: %s\n", line)
}

// finish ends the in-place line.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	p.quiet = true
}

// println writes a line to w without garbling the in-place line.
func (p *progress) println(w io.Writer, line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintln(w, line)
	if p.drawn {
		fmt.Fprintf(p.w, "idemkit: %s", p.last)
	}
}

// Write lets the tracker print through println (one line per Write).
func (p *progress) Write(b []byte) (int, error) {
	s := string(b)
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	p.println(p.w, s)
	return len(b), nil
}
