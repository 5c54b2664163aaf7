package idemkit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// bareServer answers like npm's express-idempotency middleware in front of
// a payment handler: the key header value is stored verbatim (quotes
// included); a duplicate of a key still in flight gets a bare 409,
// text/html, no Retry-After, no problem type; a duplicate of a finished one
// gets the stored answer again without any replay marker; a key reused
// with another body gets 422. A request without the right credential gets
// 401 before the key is looked at.
type bareServer struct {
	srv      *httptest.Server
	header   string // the key header
	payments atomic.Int64
	started  chan string   // a key whose handler started
	release  chan struct{} // closed: held handlers finish
	holdAll  bool          // handlers wait for release

	mu         sync.Mutex
	keys       map[string]*bareEntry
	conflict   int // 409s sent
	onConflict func()
}

type bareEntry struct {
	done   bool
	body   string
	status int
	answer string
}

func newBareServer(t *testing.T) *bareServer {
	t.Helper()
	s := &bareServer{header: "Idempotency-Key", keys: map[string]*bareEntry{}, started: make(chan string, 64), release: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
	})
	return s
}

func (s *bareServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Authorization") != "Bearer ok" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "Unauthorized")
		return
	}
	key := r.Header.Get(s.header) // verbatim
	s.mu.Lock()
	e, ok := s.keys[key]
	switch {
	case ok && !e.done:
		s.conflict++
		f := s.onConflict
		s.mu.Unlock()
		if f != nil {
			f()
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, "A previous request is still in progress")
		return
	case ok && e.body != string(body):
		s.mu.Unlock()
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, "Idempotency key reused with a different payload")
		return
	case ok:
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		io.WriteString(w, e.answer)
		return
	}
	e = &bareEntry{body: string(body)}
	if key != "" {
		s.keys[key] = e
	}
	s.mu.Unlock()
	s.started <- key
	if s.holdAll {
		<-s.release
	}
	n := s.payments.Add(1)
	s.mu.Lock()
	e.done, e.status, e.answer = true, http.StatusCreated, `{"payment":`+strconv.FormatInt(n, 10)+`}`
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	io.WriteString(w, e.answer)
}

// releaseOnFirstConflict lets the held handlers finish once a duplicate
// got its 409: the resumed client has seen the key in flight.
func (s *bareServer) releaseOnFirstConflict() {
	var once sync.Once
	s.mu.Lock()
	s.onConflict = func() { once.Do(func() { close(s.release) }) }
	s.mu.Unlock()
}

func okAuth(_ string, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer ok")
	return nil
}

// interruptedDo starts Do against s and cancels it once the handler holds
// the payment: the attempt's answer is lost. It returns the intent.
func interruptedDo(t *testing.T, c *Client, s *bareServer, body string) *Intent {
	t.Helper()
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	go func() {
		<-s.started
		cancel()
	}()
	in, err := c.Do(ctx, &Request{URL: s.srv.URL + "/pay", Body: []byte(body)})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, StatePending, in.State)
	return in
}

// TestBare409_InterruptedAndResumedEndsSucceededWithOnePayment: against a
// middleware that says "in flight" with a bare 409 and replays without a
// marker, a Do interrupted mid-request and resumed ends succeeded, one
// payment: the 409 after the lost answer is taken as "in flight".
func TestBare409_InterruptedAndResumedEndsSucceededWithOnePayment(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	s.holdAll = true
	s.releaseOnFirstConflict()
	cfg := testConfig()
	cfg.SendHookFunc = okAuth
	cfg.Logger = discardLogger()
	b := setup(t, cfg, nil)
	in := interruptedDo(t, b.c, s, `{"amount":4000}`)

	// Restarted: a new Client on the queue drains it.
	c2 := b.reopen(t, cfg)
	counts, err := c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, counts[StateSucceeded], "%v", counts)
	got, err := c2.Get(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, got.State, got.LastError)
	require.Equal(t, http.StatusCreated, got.Outcome.Status)
	require.EqualValues(t, 1, s.payments.Load(), "one payment")
	s.mu.Lock()
	require.Positive(t, s.conflict, "the resumed attempt met the key in flight")
	s.mu.Unlock()
}

// TestBare409_BatchKilledAndResumedEndsSucceeded: ten payments in flight
// when the process stops; resumed, all ten end succeeded, ten payments.
func TestBare409_BatchKilledAndResumedEndsSucceeded(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	s.holdAll = true
	s.releaseOnFirstConflict()
	cfg := testConfig()
	cfg.SendHookFunc = okAuth
	cfg.Logger = discardLogger()
	cfg.Concurrency = 10
	b := setup(t, cfg, nil)
	for i := range 10 {
		_, err := b.c.Submit(testkit.Ctx(t), &Request{URL: s.srv.URL + "/pay", Body: []byte(`{"amount":` + strconv.Itoa(1000+i) + `}`)})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	go func() {
		for range 10 {
			<-s.started
		}
		cancel()
	}()
	_, err := b.c.Drain(ctx)
	require.ErrorIs(t, err, context.Canceled)

	c2 := b.reopen(t, cfg)
	counts, err := c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 10, counts[StateSucceeded], "%v", counts)
	require.EqualValues(t, 10, s.payments.Load())
}

// TestUnknown_401AfterLostAnswerIsNotFailed: an attempt's answer is lost;
// the next attempt gets a 401 (a credential that does not work): the
// intent ends StateUnknown, not failed, and names the attempt. Resend
// under the same key with a working credential settles it: one payment.
func TestUnknown_401AfterLostAnswerIsNotFailed(t *testing.T) {
	t.Parallel()
	s := newBareServer(t)
	cfg := testConfig()
	cfg.SendHookFunc = okAuth
	cfg.Logger = discardLogger()
	b := setup(t, cfg, nil)
	in := interruptedDo(t, b.c, s, `{"amount":4000}`)

	bad := testConfig()
	bad.Logger = discardLogger()
	bad.SendHookFunc = func(_ string, r *http.Request) error { r.Header.Set("Authorization", "Bearer …"); return nil }
	c2 := b.reopen(t, bad)
	_, err := c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	got, err := c2.Wait(testkit.Ctx(t), in.ID)
	require.ErrorIs(t, err, StateUnknown)
	require.NotErrorIs(t, err, StateFailed)
	require.Equal(t, StateUnknown, got.State)
	require.Equal(t, 1, got.Unanswered)
	require.Equal(t, http.StatusUnauthorized, got.Outcome.Status)
	require.Contains(t, got.LastError, "attempt 1 got no answer")
	log, err := c2.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.False(t, log[0].NotSent)

	// Fixed credential, same key: the server replays.
	c3 := b.reopen(t, cfg)
	_, err = c3.Resend(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	_, err = c3.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	got, err = c3.Wait(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, got.State)
	require.EqualValues(t, 1, s.payments.Load())
}

// TestUnknown_RefusedConnectionIsNotALostAnswer: attempts that never left
// (connection refused) hide no effect: a 401 after them is failed.
func TestUnknown_RefusedConnectionIsNotALostAnswer(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Logger = discardLogger()
	cfg.MaxAttempts = 2
	b := setup(t, cfg, nil)
	addr := testkit.ClosedAddr(t)
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: "http://" + addr + "/pay", Body: []byte(`{}`)})
	require.ErrorIs(t, err, StatePending)
	require.Zero(t, in.Unanswered)
	s := newBareServer(t)
	_, err = rawDB(t, b.path).Exec(`UPDATE idemkit_intents SET url = ?, next_attempt_at = '2000-01-01T00:00:00.000Z' WHERE id = ?`, s.srv.URL+"/pay", in.ID)
	require.NoError(t, err)
	c2 := b.reopen(t, testConfig())
	_, err = c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	got, err := c2.Wait(testkit.Ctx(t), in.ID)
	require.ErrorIs(t, err, StateFailed)
	require.Equal(t, http.StatusUnauthorized, got.Outcome.Status)
}

// curlPay sends a payment the way another tool would: the key bare.
func curlPay(t *testing.T, s *bareServer, key, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(testkit.Ctx(t), http.MethodPost, s.srv.URL+"/pay", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer ok")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// TestIETF_KeyIsOneKeyAtAVerbatimServer: a server that stores the key
// header's value verbatim (as the npm middlewares do) sees the key the
// "ietf" profile sends and the same key sent bare by another tool as one
// key: the same key held by curl, the same key with another body, the same
// key with the same body: one payment each time, and a true final state.
func TestIETF_KeyIsOneKeyAtAVerbatimServer(t *testing.T) {
	t.Parallel()
	ietf, _ := KnownProfile("ietf")
	client := func(t *testing.T) *Client {
		cfg := testConfig()
		cfg.Profile = &ietf
		cfg.SendHookFunc = okAuth
		cfg.Logger = discardLogger()
		return setup(t, cfg, nil).c
	}
	t.Run("held by curl", func(t *testing.T) {
		t.Parallel()
		s := newBareServer(t)
		s.holdAll = true
		s.releaseOnFirstConflict()
		done := make(chan int, 1)
		go func() { done <- curlPay(t, s, "K-held", `{"amount":4000}`) }()
		<-s.started
		in, err := client(t).Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/pay", Key: "K-held", Body: []byte(`{"amount":4000}`)})
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, in.State, "the 409 is in flight (ietf), then the stored answer")
		require.Equal(t, http.StatusCreated, <-done)
		require.EqualValues(t, 1, s.payments.Load())
	})
	t.Run("other body", func(t *testing.T) {
		t.Parallel()
		s := newBareServer(t)
		require.Equal(t, http.StatusCreated, curlPay(t, s, "K-other", `{"amount":4000}`))
		_, err := client(t).Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/pay", Key: "K-other", Body: []byte(`{"amount":9999}`)})
		require.ErrorIs(t, err, ErrKeyReused, "the 9999 charge is refused as key reuse")
		require.EqualValues(t, 1, s.payments.Load())
	})
	t.Run("same body", func(t *testing.T) {
		t.Parallel()
		s := newBareServer(t)
		require.Equal(t, http.StatusCreated, curlPay(t, s, "K-same", `{"amount":4000}`))
		in, err := client(t).Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/pay", Key: "K-same", Body: []byte(`{"amount":4000}`)})
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, in.State)
		require.EqualValues(t, 1, s.payments.Load())
	})
}

// TestIETF_IntentSentQuotedBeforeKeepsItsQuotes: an intent whose earlier
// attempts went out quoted (the "ietf" profile before the change) keeps
// the quoted form, so a verbatim server sees the same key on the retry; a
// new intent goes out bare, and its form is recorded.
func TestIETF_IntentSentQuotedBeforeKeepsItsQuotes(t *testing.T) {
	t.Parallel()
	ietf, _ := KnownProfile("ietf")
	cfg := testConfig()
	cfg.Profile = &ietf
	cfg.Logger = discardLogger()
	var mu sync.Mutex
	var raw []string
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		raw = append(raw, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	old, err := b.c.Submit(testkit.Ctx(t), &Request{URL: b.srv.URL, Key: "legacy"})
	require.NoError(t, err)
	// As a client of schema 6 left it: attempted once, its form not recorded.
	_, err = rawDB(t, b.path).Exec(`UPDATE idemkit_intents SET attempts = 1, key_form = NULL WHERE id = ?`, old.ID)
	require.NoError(t, err)
	_, err = b.c.Submit(testkit.Ctx(t), &Request{URL: b.srv.URL, Key: "fresh"})
	require.NoError(t, err)
	_, err = b.c.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{`"legacy"`, "fresh"}, raw)
}
