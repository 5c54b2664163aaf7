package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
)

// TestTimeline_OrdersBySaidTime says lines out of order, as the reader
// goroutines of several children do, and checks they print in time order.
func TestTimeline_OrdersBySaidTime(t *testing.T) {
	t.Parallel()
	var out testkit.SyncBuffer
	tl := newTimeline(&out)
	base := tl.t0.Add(10 * time.Millisecond)
	tl.sayAt(base.Add(2*time.Millisecond), "server", "second")
	tl.sayAt(base.Add(3*time.Millisecond), "demo", "third\nwith a second line")
	tl.sayAt(base.Add(time.Millisecond), "client", "first")
	tl.close()

	got := out.String()
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	require.Len(t, lines, 4, "got:\n%s", got)
	require.Regexp(t, `^ +\+0\.011s  client   first$`, lines[0])
	require.Regexp(t, `^ +\+0\.012s  server   second$`, lines[1])
	require.Regexp(t, `^ +\+0\.013s  demo     third$`, lines[2])
	require.Regexp(t, `^ {20}with a second line$`, lines[3])
}

func TestEmitter_RoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	em := newEmitter(&buf)
	before := time.Now()
	em.emit(event{Kind: evDone, Key: "k", Status: 201, Replayed: true, Payment: "pay_1"})
	em.info("hello")

	dec := json.NewDecoder(&buf)
	var ev event
	require.NoError(t, dec.Decode(&ev))
	require.Equal(t, evDone, ev.Kind)
	require.Equal(t, "k", ev.Key)
	require.Equal(t, 201, ev.Status)
	require.True(t, ev.Replayed)
	require.Equal(t, "pay_1", ev.Payment)
	require.False(t, time.Unix(0, ev.At).Before(before.Truncate(time.Microsecond)), "At is stamped at emit time")
	var info event
	require.NoError(t, dec.Decode(&info))
	require.Equal(t, event{Kind: evInfo, Text: "hello", At: info.At}, info)
}

func TestLogWriter_KeepsTailAndRelaysLines(t *testing.T) {
	t.Parallel()
	var relayed []string
	w := &logWriter{relay: func(line string) { relayed = append(relayed, line) }}
	_, _ = w.Write([]byte("one\ntw"))
	_, _ = w.Write([]byte("o\n"))
	require.Equal(t, []string{"one", "two"}, relayed)
	_, _ = w.Write(bytes.Repeat([]byte("x"), 3*logTail))
	require.Len(t, w.String(), logTail)
}
