package idemkit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

// logRecorder is a slog.Handler that keeps every record, for tests that
// assert on what the client logged.
type logRecorder struct {
	mu   sync.Mutex
	recs []loggedRecord
}

type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// find returns the records whose message starts with prefix.
func (h *logRecorder) find(prefix string) []loggedRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedRecord
	for _, r := range h.recs {
		if strings.HasPrefix(r.msg, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// deadPid returns the pid of a child process that has exited and been
// reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// TestClient_TakeOverChoosesLeases: of the live leases on a queue, only
// those of dead processes on this host are expired; leases of a live
// process, of another host, of this process, of a client that does not
// name holders, and leases already run out are left alone.
func TestClient_TakeOverChoosesLeases(t *testing.T) {
	t.Parallel()
	if !takeoverSupported {
		t.Skip("no liveness check on " + runtime.GOOS)
	}
	rec := &logRecorder{}
	cfg := testConfig()
	cfg.Logger = slog.New(rec)
	b := setup(t, cfg, nil)
	ctx := testkit.Ctx(t)
	self := b.c.self
	dead := leaseOwner{Host: self.Host, PID: deadPid(t)}
	reused := leaseOwner{Host: self.Host, PID: self.PID, Start: "1"} // this pid, an earlier process
	if self.Start == "" {
		reused = dead // no start times here
	}
	live := leaseOwner{Host: self.Host, PID: 1, Start: processStartTime(1)}
	other := leaseOwner{Host: "elsewhere" + hostSuffix(), PID: dead.PID}

	now := time.Now()
	leaseEnd := wire.FormatTime(now.Add(10 * time.Minute))
	rows := map[string]struct {
		owner any
		next  string
		taken bool
	}{
		"dead":    {dead.String(), leaseEnd, true},
		"reused":  {reused.String(), leaseEnd, true},
		"live":    {live.String(), leaseEnd, false},
		"other":   {other.String(), leaseEnd, false},
		"self":    {self.String(), leaseEnd, false},
		"unnamed": {nil, leaseEnd, false},
		"ranout":  {dead.String(), wire.FormatTime(now.Add(-time.Second)), false},
		"garbage": {self.Host + "/not-a-pid/", leaseEnd, false},
	}
	for name := range rows {
		_, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/" + name, Key: name})
		require.NoError(t, err)
	}
	db := rawDB(t, b.path)
	for name, r := range rows {
		_, err := db.ExecContext(ctx, `UPDATE idemkit_intents SET lease_token = 7, attempts = 1, lease_owner = ?, next_attempt_at = ?2, leased_until = ?2 WHERE key = ?3`,
			r.owner, r.next, name)
		require.NoError(t, err)
	}

	b.c.takeOver(ctx, "")

	taken := map[string]bool{}
	pids := map[string]int{"dead": dead.PID, "reused": reused.PID}
	names := map[string]string{} // intent id -> key
	for name := range rows {
		var id string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT id FROM idemkit_intents WHERE key = ?`, name).Scan(&id))
		names[id] = name
	}
	for _, r := range rec.find("idemkit: taking over intent of dead process pid ") {
		require.NotContains(t, r.attrs, "key", "never the key in clear")
		k := names[r.attrs["intent"].(string)]
		taken[k] = true
		require.Equal(t, slog.LevelInfo, r.level)
		require.EqualValues(t, pids[k], r.attrs["pid"], "%v", r.attrs)
		require.Equal(t, fmt.Sprintf("idemkit: taking over intent of dead process pid %d", pids[k]), r.msg)
	}
	for name, r := range rows {
		var owner *string
		var next string
		var token int64
		require.NoError(t, db.QueryRowContext(ctx, `SELECT lease_owner, next_attempt_at, lease_token FROM idemkit_intents WHERE key = ?`, name).
			Scan(&owner, &next, &token))
		require.EqualValues(t, 7, token, "%s: the token only moves on the next claim", name)
		if r.taken {
			require.Nil(t, owner, "%s: lease expired", name)
			require.LessOrEqual(t, next, wire.FormatTime(time.Now()), "%s: due now", name)
			require.True(t, taken[name], "%s: logged", name)
			continue
		}
		require.Equal(t, r.next, next, "%s: lease untouched", name)
		require.False(t, taken[name], "%s: not logged", name)
		if r.owner != nil {
			require.Equal(t, r.owner, *owner, "%s: owner untouched", name)
		}
	}
	require.Len(t, taken, 2)

	// The next claims take the expired leases over, with new tokens; the
	// live ones are not due.
	for name, r := range rows {
		var id string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT id FROM idemkit_intents WHERE key = ?`, name).Scan(&id))
		cl, err := b.c.q.Claim(ctx, id, time.Now(), time.Minute, nil)
		require.NoError(t, err)
		if !r.taken && name != "ranout" {
			require.Nil(t, cl, "%s is still leased", name)
			continue
		}
		require.NotNil(t, cl, "%s is due", name)
		require.EqualValues(t, 8, cl.Token)
		require.Equal(t, self.String(), b.c.q.Owner())
		var owner string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT lease_owner FROM idemkit_intents WHERE id = ?`, id).Scan(&owner))
		require.Equal(t, self.String(), owner, "%s: the claim names this process", name)
	}

	// One intent by id, as Do does it.
	in, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/by-id", Key: "by-id"})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE idemkit_intents SET lease_token = 3, lease_owner = ?, next_attempt_at = ?2, leased_until = ?2 WHERE id = ?3`,
		dead.String(), leaseEnd, in.ID)
	require.NoError(t, err)
	b.c.takeOver(ctx, in.ID)
	got, err := b.c.Get(ctx, in.ID)
	require.NoError(t, err)
	require.False(t, got.NextAttemptAt.After(time.Now()), "the dead holder's lease on %s expired", in.ID)
}

// heldServer is the real server in front of a charge handler whose first
// request stays inside the handler until a second request with a key
// arrives: the first client dies with its request in flight, the second
// process's attempt arrives while it still is.
type heldServer struct {
	*e2eServer
	entered chan struct{} // closed when the first request is in the handler
	second  chan struct{} // closed when a second keyed request arrives
}

func newHeldServer(t *testing.T) *heldServer {
	t.Helper()
	// A short server lease: its 409's Retry-After is the lease left.
	s := &heldServer{e2eServer: newE2EServer(t, &server.Config{LeaseDuration: 2 * time.Second}),
		entered: make(chan struct{}), second: make(chan struct{})}
	var first atomic.Bool
	var n atomic.Int32
	var once sync.Once
	release := func() { once.Do(func() { close(s.second) }) }
	t.Cleanup(release) // before the server's Close, which waits for handlers
	s.setHold(func(*http.Request) {
		if !first.Swap(true) {
			close(s.entered)
			<-s.second
		}
	})
	s.setFront(func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if r.Header.Get("Idempotency-Key") != "" && n.Add(1) == 2 {
			release()
		}
		return false
	})
	return s
}

func childAuth(_ string, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer child") // the principal of childConfig
	return nil
}

// startHolder starts a child that sends key through Do and holds it in
// flight, with a 10-minute lease, and returns once the request is inside
// the handler.
func startHolder(t *testing.T, s *heldServer, queue, key string) *exec.Cmd {
	t.Helper()
	child := startChild(t, "do", "holder", queue, s.srv.URL, childKeyEnv+"="+key, childLeaseEnv+"=10m")
	select {
	case <-s.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the child's request never arrived")
	}
	return child
}

func killChild(t *testing.T, child *exec.Cmd) {
	t.Helper()
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	require.Error(t, child.Wait(), "killed")
}

// takeoverConfig is the Config of the process that resumes: a lease of 10
// minutes, so a wait for the dead holder's lease would outlast the test.
func takeoverConfig(rec *logRecorder) *Config {
	cfg := testConfig()
	cfg.LeaseDuration = 10 * time.Minute
	cfg.SendHookFunc = childAuth
	cfg.Logger = slog.New(rec)
	return cfg
}

// requireTakenOver checks the end of the story: one effect, the same key on
// every request, the replayed response, the dead holder's attempt never
// finished and the resumed ones under a newer fencing token, started long
// before the dead holder's lease would have run out, and the takeover
// logged.
func requireTakenOver(t *testing.T, s *heldServer, c *Client, rec *logRecorder, in *Intent, key string, deadPid int) {
	t.Helper()
	ctx := testkit.Ctx(t)
	require.Equal(t, key, in.Key)
	require.Equal(t, StateSucceeded, in.State, in.LastError)
	require.True(t, in.Outcome.Replayed, "the resumed attempt got the stored response")
	require.EqualValues(t, 1, s.effects.Load(), "exactly one effect")
	keys := s.seenKeys()
	require.GreaterOrEqual(t, len(keys), 2)
	for _, k := range keys {
		require.Equal(t, key, k)
	}
	log, err := c.Attempts(ctx, in.ID)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(log), 2)
	require.True(t, log[0].FinishedAt.IsZero(), "the killed attempt never finished")
	require.Less(t, log[0].Token, log[1].Token, "taken over with a new fencing token")
	require.Less(t, log[1].StartedAt.Sub(log[0].StartedAt), time.Minute, "resumed long before the 10-minute lease ran out")
	msgs := rec.find(fmt.Sprintf("idemkit: taking over intent of dead process pid %d", deadPid))
	require.Len(t, msgs, 1)
	require.Equal(t, in.ID, msgs[0].attrs["intent"])
}

// TestTakeover_DeadProcess: a child process holds an intent in flight under
// a 10-minute lease and is SIGKILLed; this process resumes it at once (well
// within the test's 20 s), with the same key and a newer fencing token,
// while the dead child's request is still inside the handler; exactly one
// effect.
func TestTakeover_DeadProcess(t *testing.T) {
	t.Parallel()
	if !takeoverSupported {
		t.Skip("no liveness check on " + runtime.GOOS)
	}
	for _, via := range []string{"Run", "Do"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			s := newHeldServer(t)
			queue := filepath.Join(t.TempDir(), "queue.db")
			key := "takeover-" + via
			child := startHolder(t, s, queue, key)
			killChild(t, child)

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rec := &logRecorder{}
			c, err := Open(ctx, queue, takeoverConfig(rec))
			require.NoError(t, err)
			defer c.Close()
			var in *Intent
			if via == "Do" {
				in, err = c.Do(ctx, &Request{URL: s.srv.URL + "/charges", Key: key,
					Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"amount":4000}`)})
			} else {
				runDone := make(chan error, 1)
				go func() { runDone <- c.Run(ctx) }()
				var all []*Intent
				all, err = c.List(ctx, nil)
				require.NoError(t, err)
				require.Len(t, all, 1)
				in, err = c.Wait(ctx, all[0].ID)
				cancel()
				require.NoError(t, <-runDone)
			}
			require.NoError(t, err, "resumed within 20 s, not after the 10-minute lease")
			requireTakenOver(t, s, c, rec, in, key, child.Process.Pid)
		})
	}
}

// TestTakeover_LiveProcessKept: while a live child process holds an
// intent in flight, a Run worker in this process sees the holder alive
// again and again and never sends it; once the child is killed, the worker
// takes the intent over at once.
func TestTakeover_LiveProcessKept(t *testing.T) {
	t.Parallel()
	if !takeoverSupported {
		t.Skip("no liveness check on " + runtime.GOOS)
	}
	s := newHeldServer(t)
	queue := filepath.Join(t.TempDir(), "queue.db")
	const key = "live-holder"
	child := startHolder(t, s, queue, key)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := &logRecorder{}
	c, err := Open(ctx, queue, takeoverConfig(rec))
	require.NoError(t, err)
	defer c.Close()
	all, err := c.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all, 1)
	id := all[0].ID
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runDone := make(chan error, 1)
	go func() { runDone <- c.Run(runCtx) }()

	alive := func() int {
		n := 0
		for _, r := range rec.find("idemkit: lease holder is alive") {
			if r.attrs["pid"] == int64(child.Process.Pid) || r.attrs["pid"] == child.Process.Pid {
				n++
			}
		}
		return n
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return alive() >= 20 }, "the worker checked the live holder 20 times")
	require.Len(t, s.seenKeys(), 1, "nothing sent while the live holder has the intent")
	require.Empty(t, rec.find("idemkit: taking over"))
	held, err := c.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 1, held.Attempts)
	require.True(t, held.NextAttemptAt.After(time.Now().Add(5*time.Minute)), "the holder's lease is intact")

	killChild(t, child)
	in, err := c.Wait(ctx, id)
	require.NoError(t, err, "taken over within 20 s, not after the 10-minute lease")
	stopRun()
	require.NoError(t, <-runDone)
	requireTakenOver(t, s, c, rec, in, key, child.Process.Pid)
}

// TestTakeover_SameProcessKept: a lease held by another Client of this
// same process is never taken over, however long it is held.
func TestTakeover_SameProcessKept(t *testing.T) {
	t.Parallel()
	s := newHeldServer(t)
	rec := &logRecorder{}
	b := setup(t, takeoverConfig(rec), nil)
	ctx := testkit.Ctx(t)
	doDone := make(chan error, 1)
	go func() {
		_, err := b.c.Do(ctx, charge(s.srv.URL))
		doDone <- err
	}()
	<-s.entered
	c2 := b.reopen(t, takeoverConfig(rec))
	in, err := c2.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, in, 1)
	for range 20 {
		c2.takeOver(ctx, "")
		c2.takeOver(ctx, in[0].ID)
	}
	cl, err := c2.q.Claim(ctx, in[0].ID, time.Now(), time.Minute, nil)
	require.NoError(t, err)
	require.Nil(t, cl, "the lease of the other Client is intact")
	require.Empty(t, rec.find("idemkit: taking over"))
	require.Len(t, s.seenKeys(), 1)
	// Let the first Client finish: a second keyed request releases the
	// handler.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+"/charges", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "release")
	require.NoError(t, childAuth("", req))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.NoError(t, <-doDone)
}
