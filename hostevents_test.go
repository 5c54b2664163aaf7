package idemkit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestEvents_HostDownProbingBackAndProgress: an agent offline sees it: its
// first attempt on a host that does not answer is EventHostDown (and an
// INFO line), a probe follows, the host's first answer is EventHostBack,
// and Drain reports the counts as they change (EventProgress). No INFO
// line carries the key.
func TestEvents_HostDownProbingBackAndProgress(t *testing.T) {
	t.Parallel()
	addr := testkit.ClosedAddr(t)
	var mu sync.Mutex
	var kinds []EventKind
	var last map[IntentState]int
	sawDown := make(chan struct{})
	var once sync.Once
	rec := &logRecorder{}
	cfg := testConfig()
	cfg.Logger = slog.New(rec)
	cfg.OnEventFunc = func(e Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind)
		if e.Kind == EventProgress {
			last = e.Counts
		}
		mu.Unlock()
		if e.Kind == EventProbing {
			once.Do(func() { close(sawDown) })
		}
	}
	b := setup(t, cfg, nil)
	const key = "order-secret-4711"
	for i := range 3 {
		_, err := b.c.Submit(testkit.Ctx(t), &Request{URL: "http://" + addr + "/pay", Key: fmt.Sprintf("%s-%d", key, i)})
		require.NoError(t, err)
	}
	go func() {
		<-sawDown
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
		srv.Listener = l
		srv.Start()
		t.Cleanup(srv.Close)
	}()
	ctx, cancel := context.WithTimeout(testkit.Ctx(t), 30*time.Second)
	defer cancel()
	counts, err := b.c.Drain(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, counts[StateSucceeded])

	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, kinds, EventHostDown)
	require.Contains(t, kinds, EventProbing)
	require.Contains(t, kinds, EventHostBack)
	require.Contains(t, kinds, EventProgress)
	require.Equal(t, map[IntentState]int{StateSucceeded: 3}, last, "the last progress is the final count")
	require.NotEmpty(t, rec.find("idemkit: host does not answer"))
	require.NotEmpty(t, rec.find("idemkit: host answers again"))
	require.Len(t, rec.find("idemkit: intent ended"), 3)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.recs {
		if r.level < slog.LevelInfo {
			continue
		}
		line := r.msg + fmt.Sprint(r.attrs)
		require.NotContains(t, line, key, "INFO and above never carry the key: %s", line)
		require.False(t, strings.Contains(line, "Authorization"), line)
	}
}
