package idemkit

// End-to-end tests against the real server package (SQLite store, lease
// mode) over httptest. Tests may import server; the client never does.

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// e2eServer is the real middleware in front of a charges handler that
// counts its effects.
type e2eServer struct {
	srv     *httptest.Server
	effects atomic.Int32
	mu      sync.Mutex
	keys    []string
	// hold, if set, is called by the handler before it answers.
	hold func(r *http.Request)
	// front, if set, sees every request first and may answer it instead.
	front func(w http.ResponseWriter, r *http.Request, next http.Handler) bool
	// answer, if set, is the handler's own answer instead of 201.
	answer func(w http.ResponseWriter)
}

func (s *e2eServer) setHold(f func(r *http.Request)) {
	s.mu.Lock()
	s.hold = f
	s.mu.Unlock()
}

func (s *e2eServer) setFront(f func(w http.ResponseWriter, r *http.Request, next http.Handler) bool) {
	s.mu.Lock()
	s.front = f
	s.mu.Unlock()
}

func newE2EServer(t *testing.T, cfg *server.Config) *e2eServer {
	t.Helper()
	ctx := testkit.Ctx(t)
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "server.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	if cfg == nil {
		cfg = &server.Config{}
	}
	cfg.PrincipalFunc = func(r *http.Request) (string, error) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || tok == "" {
			return "", errors.New("no bearer token")
		}
		return tok, nil
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	mw, err := server.New(st, cfg)
	require.NoError(t, err)
	s := &e2eServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		n := s.effects.Add(1)
		s.mu.Lock()
		hold := s.hold
		s.mu.Unlock()
		if hold != nil {
			hold(r)
		}
		s.mu.Lock()
		answer := s.answer
		s.mu.Unlock()
		if answer != nil {
			answer(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})
	h := mw.Wrap(mux)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		front := s.front
		s.mu.Unlock()
		if front != nil && front(w, r, h) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *e2eServer) seenKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

func authHook(_ string, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer acct_1")
	return nil
}

func charge(url string) *Request {
	return &Request{URL: url + "/charges", Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"amount": 4000, "currency": "eur"}`)}
}

// TestE2E_LostResponseIsReplayed: the server commits the charge, the
// response is lost on the way back; the retry carries the same key and gets
// the stored response. One effect.
func TestE2E_LostResponseIsReplayed(t *testing.T) {
	t.Parallel()
	s := newE2EServer(t, nil)
	var dropped atomic.Bool
	s.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if dropped.Swap(true) {
			return false
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r) // committed on the server...
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // ...and the answer never arrives
		}
		return true
	})
	cfg := testConfig()
	cfg.SendHookFunc = authHook
	b := setup(t, cfg, nil)
	in, err := b.c.Do(testkit.Ctx(t), charge(s.srv.URL))
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, in.State)
	require.EqualValues(t, 1, s.effects.Load(), "exactly one effect")
	require.True(t, in.Outcome.Replayed, "the outcome is the stored response")
	require.Equal(t, http.StatusCreated, in.Outcome.Status)
	require.JSONEq(t, `{"charge":1}`, string(in.Outcome.Body))
	keys := s.seenKeys()
	require.GreaterOrEqual(t, len(keys), 2)
	for _, k := range keys {
		require.Equal(t, in.Key, k)
	}
	log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, 0, log[0].Status, "first attempt: no response")
	require.True(t, log[len(log)-1].Replayed)
}

// TestE2E_InFlightIsWaitedOut: while another request with the key runs,
// the server answers 409 + Retry-After; the client waits and then gets the
// replay. One effect.
func TestE2E_InFlightIsWaitedOut(t *testing.T) {
	t.Parallel()
	// Retry-After comes from the remaining lease: keep it short.
	s := newE2EServer(t, &server.Config{LeaseDuration: 2 * time.Second})
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var first atomic.Bool
	s.setHold(func(r *http.Request) {
		if !first.Swap(true) {
			entered <- struct{}{}
			<-release
		}
	})
	const key = "order-77-pay"
	// The "other" request: the same intent sent by something else first.
	otherDone := make(chan error, 1)
	go func() {
		req := charge(s.srv.URL)
		hr, _ := http.NewRequest(http.MethodPost, req.URL, bytes.NewReader(req.Body))
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Idempotency-Key", key)
		hr.Header.Set("Authorization", "Bearer acct_1")
		resp, err := http.DefaultClient.Do(hr)
		if err == nil {
			resp.Body.Close()
		}
		otherDone <- err
	}()
	<-entered

	var conflicts, withRetryAfter atomic.Int32
	cfg := testConfig()
	cfg.SendHookFunc = authHook
	b := setup(t, cfg, nil)
	s.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if rec.Code == http.StatusConflict {
			if rec.Header().Get("Retry-After") != "" {
				withRetryAfter.Add(1)
			}
			if conflicts.Add(1) == 1 {
				close(release) // the other request finishes during our wait
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	req := charge(s.srv.URL)
	req.Key = key
	in, err := b.c.Do(testkit.Ctx(t), req)
	require.NoError(t, err)
	require.NoError(t, <-otherDone)
	require.GreaterOrEqual(t, conflicts.Load(), int32(1))
	require.Equal(t, conflicts.Load(), withRetryAfter.Load(), "every 409 has a Retry-After")
	require.True(t, in.Outcome.Replayed)
	require.EqualValues(t, 1, s.effects.Load())
	log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, log[0].Status)
}

// TestE2E_HorizonAndShorterWindow: a server with a 10-minute window shortens
// the horizon; with a server that keeps failing (5xx, never stored) and a
// clock that jumps, no attempt is sent after the horizon.
func TestE2E_HorizonAndShorterWindow(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := newE2EServer(t, &server.Config{Window: 10 * time.Minute})
	var mu sync.Mutex
	var sentAt []time.Time
	s.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		mu.Lock()
		sentAt = append(sentAt, clock.Now())
		mu.Unlock()
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		// The gateway passes the window on, not the server's replay
		// marker (a replay would be final).
		w.Header().Set(wire.HeaderWindow, rec.Header().Get(wire.HeaderWindow))
		clock.Advance(2 * time.Minute)
		// The handler ran; the gateway in front fails. Not stored: 5xx.
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	cfg := testConfig()
	cfg.SendHookFunc = authHook
	cfg.timeNowFunc = clock.Now
	b := setup(t, cfg, nil)
	in, err := b.c.Do(testkit.Ctx(t), charge(s.srv.URL))
	require.ErrorIs(t, err, StateExpired)
	// 24h configured, 600 s advertised, margin min(1m, 60s): horizon = first + 9m.
	require.Equal(t, in.FirstAttemptAt.Add(9*time.Minute), in.Horizon)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, sentAt, 5, "attempts at 0, 2, 4, 6 and 8 minutes")
	for _, at := range sentAt {
		require.False(t, at.After(in.Horizon))
	}
	require.Equal(t, 5, in.Attempts)
}

// TestE2E_CrashResumesWithSameKey: a child process is SIGKILLed while its
// request is inside the handler; a new process on the same queue file takes
// the intent over after the lease, resends it with the same key and gets
// the stored response. Exactly one effect.
func TestE2E_CrashResumesWithSameKey(t *testing.T) {
	t.Parallel()
	s := newE2EServer(t, nil)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var first atomic.Bool
	s.setHold(func(r *http.Request) {
		if !first.Swap(true) {
			entered <- struct{}{}
			<-release
		}
	})
	queue := filepath.Join(t.TempDir(), "queue.db")
	const key = "crash-key-1"
	child := startChild(t, "do", "doomed", queue, s.srv.URL, childKeyEnv+"="+key)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the child's request never arrived")
	}
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	err := child.Wait()
	require.Error(t, err, "killed")
	close(release) // the server finishes and stores the response; nobody hears it

	resume := startChild(t, "resume", "heir", queue, s.srv.URL)
	require.NoError(t, resume.Wait())

	c, in := resumedIntent(t, s, queue, key)
	require.True(t, in.Outcome.Replayed, "the resumed attempt got the stored response")
	require.GreaterOrEqual(t, in.Attempts, 2)
	log, err := c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.True(t, log[0].FinishedAt.IsZero(), "the killed attempt never finished")
	require.Less(t, log[0].Token, log[len(log)-1].Token, "taken over with a new fencing token")
}

// TestE2E_KeysArriveExactly: under the idemkit profile keys go out bare,
// and a key that HTTP would mangle bare (surrounding spaces, a leading
// quote, a comma) is refused before anything is queued, never quoted
// behind the caller's back; under a profile with KeyQuoted (a strict RFC
// 8941 server) every key goes out as an sf-string, and the server sees
// exactly the client's key.
func TestE2E_KeysArriveExactly(t *testing.T) {
	t.Parallel()
	s := newE2EServer(t, nil)
	var mu sync.Mutex
	var seen, raw []string
	s.setFront(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		k, err := wire.ParseKey(r.Header.Values("Idempotency-Key"))
		if err == nil {
			mu.Lock()
			seen = append(seen, k)
			raw = append(raw, r.Header.Get("Idempotency-Key"))
			mu.Unlock()
		}
		return false
	})
	mangled := []string{" padded ", `"collide"`, "a,b"}

	cfg := testConfig()
	cfg.SendHookFunc = authHook
	bare := setup(t, cfg, nil)
	for _, key := range mangled {
		req := charge(s.srv.URL)
		req.Key = key
		_, err := bare.c.Do(testkit.Ctx(t), req)
		require.ErrorIs(t, err, ErrInvalidRequest, "key %q", key)
	}
	for i, key := range []string{"padded", "ключ-1", `back\slash "q"`} {
		req := charge(s.srv.URL)
		req.Key = key
		req.Body = []byte(fmt.Sprintf(`{"amount": %d}`, i+1))
		_, err := bare.c.Do(testkit.Ctx(t), req)
		require.NoError(t, err, "key %q", key)
	}
	require.Equal(t, []string{"padded", "ключ-1", `back\slash "q"`}, raw, "sent bare")

	ietf, _ := KnownProfile("ietf")
	ietf.KeyQuoted = true
	cfg = testConfig()
	cfg.SendHookFunc = authHook
	cfg.Profile = &ietf
	quoted := setup(t, cfg, nil)
	mu.Lock()
	seen, raw = nil, nil
	mu.Unlock()
	keys := append([]string{"collide", `back\slash "q2"`}, mangled...)
	for i, key := range keys {
		req := charge(s.srv.URL)
		req.Key = key
		req.Body = []byte(fmt.Sprintf(`{"amount": %d}`, i+10))
		in, err := quoted.c.Do(testkit.Ctx(t), req)
		require.NoError(t, err, "key %q", key)
		require.False(t, in.Outcome.Replayed, "key %q got another intent's replay", key)
	}
	require.Equal(t, keys, seen)
	require.Equal(t, `"collide"`, raw[0], "sent as an sf-string")
	require.EqualValues(t, 3+len(keys), s.effects.Load())

	for _, bad := range []string{"a\u0085b", "tab\there", "ключ"} {
		_, err := quoted.c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/charges", Key: bad})
		require.ErrorIs(t, err, ErrInvalidRequest, "key %q", bad)
	}
}

// TestE2E_HandlerConflictIsFinal: a handler's own 409 or 429 behind the
// real middleware (no in-flight problem type, no Retry-After) is a
// definitive answer: failed after one attempt, not retried for a day and
// then "expired". The middleware stores it; another client sending the
// same key gets it replayed, which is final too.
func TestE2E_HandlerConflictIsFinal(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusConflict, http.StatusTooManyRequests} {
		s := newE2EServer(t, nil)
		s.mu.Lock()
		s.answer = func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, `{"error":"invoice already paid"}`)
		}
		s.mu.Unlock()
		var ins []*Intent
		for range 2 {
			cfg := testConfig()
			cfg.SendHookFunc = authHook
			b := setup(t, cfg, nil)
			req := charge(s.srv.URL)
			req.Key = fmt.Sprintf("invoice-%d", status)
			in, err := b.c.Do(testkit.Ctx(t), req)
			require.ErrorIs(t, err, StateFailed, "status %d", status)
			require.Equal(t, 1, in.Attempts)
			require.Equal(t, status, in.Outcome.Status)
			ins = append(ins, in)
		}
		// The server stores no 409 or 429 (transient statuses: nothing
		// happened), so each client's one attempt ran the handler and got a
		// fresh answer; neither client retried it.
		require.False(t, ins[0].Outcome.Replayed)
		require.False(t, ins[1].Outcome.Replayed, "a 409/429 is not stored, so it is never replayed")
		require.EqualValues(t, 2, s.effects.Load())
	}
}

// TestDo_SuccessPaysOneFsync: a Do answered by the server fsyncs once (the
// intent and its attempt, before the first byte); the outcome is committed
// with synchronous=NORMAL, and the connection is back to FULL afterwards.
func TestDo_SuccessPaysOneFsync(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	ctx := testkit.Ctx(t)
	synced, all := b.c.q.SyncedCommits.Load(), b.c.q.Commits.Load()
	in, err := b.c.Do(ctx, &Request{URL: b.srv.URL + "/charges", Body: []byte(`{"amount":1}`)})
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, in.State)
	require.EqualValues(t, 1, b.c.q.SyncedCommits.Load()-synced, "one fsync")
	require.EqualValues(t, 2, b.c.q.Commits.Load()-all, "the intent, then the outcome")
	for i := 0; i < 3; i++ { // whichever pooled connection answers
		var level int
		require.NoError(t, b.c.q.DB().QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level))
		require.Equal(t, 2, level, "synchronous is FULL again")
	}
}

// TestE2E_OutcomeLostAfterTheAnswerCostsOnlyAReplay: the outcome of an
// answered attempt is written without an fsync, so a power cut may lose
// it. A child process is SIGKILLed right after the server's answer (before
// the outcome is written: the state a lost outcome leaves), or right after
// the unsynced outcome commit; a new process resumes the queue: the same
// key, one effect.
//
// What it proves: whatever of the outcome reached the queue, resuming sends
// the same key and the server's stored answer ends the intent. What it
// cannot: SIGKILL does not drop pages the operating system already holds,
// so the "after the commit" case always finds the outcome; a power cut
// would leave the "before" case, which the first subtest is.
func TestE2E_OutcomeLostAfterTheAnswerCostsOnlyAReplay(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		killAt      EventKind
		wantReplay  bool // the resume had to send it again
		minAttempts int
	}{
		"KilledBeforeTheOutcome": {EventAnswered, true, 2},
		"KilledAfterTheOutcome":  {EventEnded, false, 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newE2EServer(t, nil)
			queue := filepath.Join(t.TempDir(), "queue.db")
			key := "answered-" + name
			child := startChild(t, "do", "doomed", queue, s.srv.URL, childKeyEnv+"="+key, childKillAtEnv+"="+string(tc.killAt))
			require.Error(t, child.Wait(), "killed")
			require.EqualValues(t, 1, s.effects.Load(), "the server did the work once")

			resume := startChild(t, "resume", "heir", queue, s.srv.URL)
			require.NoError(t, resume.Wait())

			_, in := resumedIntent(t, s, queue, key)
			require.Equal(t, tc.wantReplay, in.Outcome.Replayed)
			require.GreaterOrEqual(t, in.Attempts, tc.minAttempts)
		})
	}
}

// resumedIntent opens the queue after a crash and its resume and checks it
// holds one intent, key, succeeded, with one effect on s and only key sent.
func resumedIntent(t *testing.T, s *e2eServer, queue, key string) (*Client, *Intent) {
	t.Helper()
	c, err := Open(testkit.Ctx(t), queue, testConfig())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	all, err := c.List(testkit.Ctx(t), nil)
	require.NoError(t, err)
	require.Len(t, all, 1)
	in := all[0]
	require.Equal(t, key, in.Key)
	require.Equal(t, StateSucceeded, in.State)
	require.EqualValues(t, 1, s.effects.Load(), "exactly one effect")
	for _, k := range s.seenKeys() {
		require.Equal(t, key, k)
	}
	return c, in
}

// TestE2E_Handler422FreshAndReplayedAgree: a handler's own 422 (a
// validation failure, not key reuse) is stored by the real server; the
// first answer and its replay to another queue sending the same key and
// request map to the same Go error, StateFailed, never ErrKeyReused (the
// profile reads the problem type through the wire contract, not the
// status).
func TestE2E_Handler422FreshAndReplayedAgree(t *testing.T) {
	t.Parallel()
	s := newE2EServer(t, nil)
	s.answer = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error":"amount must be positive"}`)
	}
	cfg := testConfig()
	cfg.SendHookFunc = authHook
	var errs []error
	for _, replayed := range []bool{false, true} {
		b := setup(t, cfg, nil) // a queue of its own: the server decides
		req := charge(s.srv.URL)
		req.Key = "handler-422"
		in, err := b.c.Do(testkit.Ctx(t), req)
		require.ErrorIs(t, err, StateFailed, "replayed %v", replayed)
		require.NotErrorIs(t, err, ErrKeyReused, "replayed %v", replayed)
		require.Equal(t, replayed, in.Outcome.Replayed)
		require.Equal(t, http.StatusUnprocessableEntity, in.Outcome.Status)
		errs = append(errs, errors.Unwrap(err))
		// Read back from the file, it is the same error.
		c2 := b.reopen(t, cfg)
		stored, err := c2.Wait(testkit.Ctx(t), in.ID)
		require.ErrorIs(t, err, StateFailed)
		require.NotErrorIs(t, err, ErrKeyReused)
		require.Equal(t, StateFailed, stored.State)
	}
	require.Equal(t, errs[0], errs[1], "fresh and replayed map to one error")
	require.EqualValues(t, 1, s.effects.Load(), "the handler ran once")
}

// TestE2E_KeyReused: the same key with a different body is the real
// server's 422 (the wire contract's key-reused problem type): the intent
// ends failed with ErrKeyReused, and is never retried. It is ErrKeyReused
// when it arrives, when the queue file is read back after a restart, and
// when the same reused key is sent again and answered again.
func TestE2E_KeyReused(t *testing.T) {
	t.Parallel()
	s := newE2EServer(t, nil)
	cfg := testConfig()
	cfg.SendHookFunc = authHook
	b := setup(t, cfg, nil)
	first := charge(s.srv.URL)
	first.Key = "reused"
	_, err := b.c.Do(testkit.Ctx(t), first)
	require.NoError(t, err)

	for _, round := range []string{"fresh", "again"} {
		other := setup(t, cfg, nil)
		second := charge(s.srv.URL)
		second.Key = "reused"
		second.Body = []byte(`{"amount": 400000, "currency": "eur"}`)
		// Another queue (another device) reuses the key for another amount.
		in, err := other.c.Do(testkit.Ctx(t), second)
		require.ErrorIs(t, err, ErrKeyReused, round)
		require.Equal(t, StateFailed, in.State, round)
		require.Equal(t, 1, in.Attempts, round)
		require.Equal(t, http.StatusUnprocessableEntity, in.Outcome.Status, round)
		require.Equal(t, "application/problem+json", in.Outcome.Header.Get("Content-Type"), round)
		require.Contains(t, string(in.Outcome.Body), wire.ProblemType(wire.ProblemKeyReused), round)

		c2 := other.reopen(t, cfg)
		stored, err := c2.Wait(testkit.Ctx(t), in.ID)
		require.ErrorIs(t, err, ErrKeyReused, "%s, read back from the file", round)
		require.Equal(t, StateFailed, stored.State)
	}
	require.EqualValues(t, 1, s.effects.Load())
}

// TestE2E_OmittedBodyMarkerIsKept: the server stored the outcome without
// its body (over MaxResponseBytes) and replays it with
// Idempotent-Response-Omitted: true. The outcome keeps that marker, in
// Do's answer and as stored, so the caller can tell an empty body from an
// omitted one.
func TestE2E_OmittedBodyMarkerIsKept(t *testing.T) {
	t.Parallel()
	s := newE2EServer(t, &server.Config{MaxResponseBytes: 16})
	s.mu.Lock()
	s.answer = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":1,"receipt":"%s"}`, strings.Repeat("x", 64))
	}
	s.mu.Unlock()
	cfg := testConfig()
	cfg.SendHookFunc = authHook
	first := setup(t, cfg, nil)
	req := charge(s.srv.URL)
	req.Key = "omitted-body"
	in, err := first.c.Do(testkit.Ctx(t), req)
	require.NoError(t, err)
	require.False(t, in.Outcome.Replayed)

	second := setup(t, cfg, nil) // another queue: the server replays
	in, err = second.c.Do(testkit.Ctx(t), req)
	require.NoError(t, err)
	require.True(t, in.Outcome.Replayed)
	require.Empty(t, in.Outcome.Body)
	require.Equal(t, "true", in.Outcome.Header.Get("Idempotent-Response-Omitted"))
	stored, err := second.c.Get(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, "true", stored.Outcome.Header.Get("Idempotent-Response-Omitted"), "kept on disk")
}
