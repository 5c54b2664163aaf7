package main

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// timeline prints the demo's narration: every line stamped with the time
// since the start of the demo and who did what. Lines come from several
// processes at once (each child's reader goroutine, the demo itself), so the
// timeline holds each line back for a moment and prints in the order of the
// time it was said, not of its arrival. It is safe for concurrent use; close
// prints whatever is held back.
type timeline struct {
	w  io.Writer
	t0 time.Time

	mu      sync.Mutex
	held    []entry // sorted by at, then seq
	seq     int
	stop    chan struct{}
	stopped chan struct{}
}

// entry is one held-back line.
type entry struct {
	at   time.Time
	seq  int
	who  string // "" for a heading or plain text
	text string
}

const (
	// holdBack is how long a line waits for earlier lines to arrive.
	holdBack = 60 * time.Millisecond
	// whoWidth is the width of the "who" column.
	whoWidth = 8
)

// newTimeline returns a timeline starting now; close it when done.
func newTimeline(w io.Writer) *timeline {
	tl := &timeline{w: w, t0: time.Now(), stop: make(chan struct{}), stopped: make(chan struct{})}
	go tl.flushLoop()
	return tl
}

func (tl *timeline) flushLoop() {
	defer close(tl.stopped)
	t := time.NewTicker(holdBack / 4)
	defer t.Stop()
	for {
		select {
		case <-tl.stop:
			tl.flush(time.Time{})
			return
		case now := <-t.C:
			tl.flush(now.Add(-holdBack))
		}
	}
}

// flush prints the lines said before until (all of them if until is zero).
func (tl *timeline) flush(until time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, e := range tl.held {
		if !until.IsZero() && e.at.After(until) {
			break
		}
		tl.print(e)
		n++
	}
	tl.held = tl.held[n:]
}

func (tl *timeline) print(e entry) {
	if e.who == "" {
		fmt.Fprintln(tl.w, e.text)
		return
	}
	stamp := fmt.Sprintf("%+8.3fs", e.at.Sub(tl.t0).Seconds())
	for i, line := range strings.Split(strings.TrimRight(e.text, "\n"), "\n") {
		if i == 0 {
			fmt.Fprintf(tl.w, "%s  %-*s %s\n", stamp, whoWidth, e.who, line)
			continue
		}
		fmt.Fprintf(tl.w, "%s  %-*s %s\n", strings.Repeat(" ", len(stamp)), whoWidth, "", line)
	}
}

// add holds a line back.
func (tl *timeline) add(e entry) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.seq++
	e.seq = tl.seq
	i := sort.Search(len(tl.held), func(i int) bool { return tl.held[i].at.After(e.at) })
	tl.held = append(tl.held, entry{})
	copy(tl.held[i+1:], tl.held[i:])
	tl.held[i] = e
}

// close prints every line held back and stops the timeline.
func (tl *timeline) close() {
	close(tl.stop)
	<-tl.stopped
}

// sayAt prints text (which may span lines) as said by who at t.
func (tl *timeline) sayAt(t time.Time, who, text string) { tl.add(entry{at: t, who: who, text: text}) }

// say prints text as said by who now.
func (tl *timeline) say(who, text string) { tl.sayAt(time.Now(), who, text) }

// sayf is say with a format.
func (tl *timeline) sayf(who, format string, args ...any) { tl.say(who, fmt.Sprintf(format, args...)) }

// section prints a heading.
func (tl *timeline) section(format string, args ...any) {
	tl.add(entry{at: time.Now(), text: "\n== " + fmt.Sprintf(format, args...)})
}

// plain prints text without a stamp.
func (tl *timeline) plain(format string, args ...any) {
	tl.add(entry{at: time.Now(), text: fmt.Sprintf(format, args...)})
}

// logWriter is a child's stderr: it keeps the last bytes for error reports
// and, if relay is set, prints each line on the timeline.
type logWriter struct {
	mu      sync.Mutex
	tail    bytes.Buffer
	partial []byte
	relay   func(line string)
}

// logTail is how much of a child's stderr is kept.
const logTail = 16 << 10

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail.Write(p)
	if w.tail.Len() > 2*logTail {
		b := append([]byte(nil), w.tail.Bytes()[w.tail.Len()-logTail:]...)
		w.tail.Reset()
		w.tail.Write(b)
	}
	if w.relay != nil {
		w.partial = append(w.partial, p...)
		for {
			i := bytes.IndexByte(w.partial, '\n')
			if i < 0 {
				break
			}
			w.relay(string(w.partial[:i]))
			w.partial = w.partial[i+1:]
		}
	}
	return len(p), nil
}

// String returns the kept tail.
func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.tail.String()
	if len(s) > logTail {
		s = s[len(s)-logTail:]
	}
	return s
}
