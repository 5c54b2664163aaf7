package intenttest

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Run runs every case of the suite against b, each in a subtest of its own,
// in parallel.
func Run(t *testing.T, b Backend) {
	cases := []struct {
		name string
		run  func(t *testing.T, b Backend)
	}{
		{"KeyMintedOnce", testKeyMintedOnce},
		{"DurableBeforeFirstByte", testDurableBeforeFirstByte},
		{"Horizon", testHorizon},
		{"LearnedWindow", testLearnedWindow},
		{"RetryAfter", testRetryAfter},
		{"ReplayFinal", testReplayFinal},
		{"ReplayAfterLostAnswer", testReplayAfterLostAnswer},
		{"Business409Failed", testBusiness409Failed},
		{"OutcomeUnknown", testOutcomeUnknown},
		{"Budget", testBudget},
		{"Takeover", testTakeover},
		{"BytesPreserved", testBytesPreserved},
		{"CredentialsNeverStored", testCredentialsNeverStored},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, b)
		})
	}
}

// defaults are the options of every case unless it says otherwise: short
// attempts and leases, a fixed short backoff.
func defaults() Options {
	return Options{
		AttemptTimeout: 3 * time.Second,
		LeaseDuration:  4 * time.Second,
		Credential:     "intenttest-hook-credential",
		Backoff:        50 * time.Millisecond,
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// work runs q's workers in this process until the test ends.
func work(t *testing.T, q Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = q.Work(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func post(url string, body string) *Request {
	return &Request{Method: http.MethodPost, URL: url, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
}

func submit(t *testing.T, q Queue, r *Request) *Intent {
	t.Helper()
	in, err := q.Submit(testCtx(t), r)
	require.NoError(t, err)
	require.NotEmpty(t, in.ID)
	require.NotEmpty(t, in.Key)
	return in
}

func wait(t *testing.T, q Queue, id string) *Intent {
	t.Helper()
	in, err := q.Wait(testCtx(t), id)
	require.NoError(t, err, "wait for intent %s", id)
	require.NotEqual(t, StatePending, in.State)
	return in
}

func open(t *testing.T, b Backend, o Options) Queue {
	t.Helper()
	q := b.Open(t, o)
	require.NotNil(t, q)
	return q
}

// The key is minted once: every attempt of an intent carries its key, and two
// intents have two keys.
func testKeyMintedOnce(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	q := open(t, b, defaults())
	in1 := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	in2 := submit(t, q, post(a.url("/charges"), `{"amount":2}`))
	require.NotEqual(t, in1.Key, in2.Key, "two intents, two keys")
	work(t, q)
	got1, got2 := wait(t, q, in1.ID), wait(t, q, in2.ID)
	require.Equal(t, StateSucceeded, got1.State)
	require.Equal(t, StateSucceeded, got2.State)
	require.Equal(t, in1.Key, got1.Key)
	require.Equal(t, in2.Key, got2.Key)

	per := map[string]int{}
	for _, s := range a.requests() {
		per[s.key]++
	}
	require.Len(t, per, 2, "keys seen by the server: %v", per)
	require.Equal(t, got1.Attempts, per[in1.Key], "every attempt of intent 1 carries its key")
	require.Equal(t, got2.Attempts, per[in2.Key], "every attempt of intent 2 carries its key")
	require.Equal(t, 5, per[in1.Key]+per[in2.Key], "three 503s and two successes")
}

// The intent, and its first attempt, are on disk before the first byte
// reaches the server.
func testDurableBeforeFirstByte(t *testing.T, b Backend) {
	var q Queue
	var mu sync.Mutex
	ids := map[string]string{} // key -> id
	problems := make(chan string, 16)
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		id := ids[key]
		mu.Unlock()
		in, err := q.Get(r.Context(), id)
		switch {
		case err != nil:
			problems <- fmt.Sprintf("get %s at the first byte: %v", id, err)
		case in.Key != key:
			problems <- fmt.Sprintf("stored key %q, sent %q", in.Key, key)
		case in.State != StatePending:
			problems <- fmt.Sprintf("state at the first byte %s, want pending", in.State)
		case in.FirstAttemptAt.IsZero():
			problems <- "the first attempt was not recorded before it was sent"
		case in.Attempts < 1:
			problems <- fmt.Sprintf("attempts at the first byte %d, want the attempt on the wire counted", in.Attempts)
		}
		w.WriteHeader(http.StatusCreated)
	})
	q = open(t, b, defaults())
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	mu.Lock()
	ids[in.Key] = in.ID
	mu.Unlock()

	// Durable and not sent: nothing reached the server yet.
	got, err := q.Get(testCtx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, StatePending, got.State)
	require.Equal(t, in.Key, got.Key)
	require.Zero(t, a.count())

	work(t, q)
	got = wait(t, q, in.ID)
	require.Equal(t, StateSucceeded, got.State)
	close(problems)
	for p := range problems {
		t.Error(p)
	}
}

// No attempt starts after the horizon: first attempt + window - margin.
func testHorizon(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	o := defaults()
	o.Window, o.SafetyMargin = 3*time.Second, time.Second
	o.Backoff = 200 * time.Millisecond
	q := open(t, b, o)
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateExpired, got.State, "last error: %s", got.LastError)
	require.False(t, got.FirstAttemptAt.IsZero())
	span := got.Horizon.Sub(got.FirstAttemptAt)
	require.LessOrEqual(t, span, 3*time.Second, "horizon within the window")
	require.GreaterOrEqual(t, span, 2600*time.Millisecond, "margin at most a tenth of the window: got %v", span)
	reqs := a.requests()
	require.GreaterOrEqual(t, len(reqs), 2)
	for i, s := range reqs {
		require.False(t, s.at.After(got.Horizon.Add(500*time.Millisecond)), "attempt %d at %v after the horizon %v", i+1, s.at, got.Horizon)
	}
}

// A window the host advertised shortens the horizon, and is remembered for
// the host: a later intent to it expires as soon, without being told again.
func testLearnedWindow(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			w.Header().Set("Idempotency-Window", "3")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	o := defaults()
	o.Window, o.SafetyMargin = time.Hour, time.Second
	o.Backoff = 200 * time.Millisecond
	q := open(t, b, o)
	work(t, q)

	in := submit(t, q, post(a.url("/first"), `{"amount":1}`))
	got := wait(t, q, in.ID)
	require.Equal(t, StateExpired, got.State, "last error: %s", got.LastError)
	require.LessOrEqual(t, got.Horizon.Sub(got.FirstAttemptAt), 3*time.Second, "the advertised window shortens the horizon")

	in2 := submit(t, q, post(a.url("/second"), `{"amount":2}`))
	got2 := wait(t, q, in2.ID)
	require.Equal(t, StateExpired, got2.State, "last error: %s", got2.LastError)
	require.LessOrEqual(t, got2.Horizon.Sub(got2.FirstAttemptAt), 3*time.Second, "the window learned from the host applies to its later intents")
}

// A Retry-After is honoured.
func testRetryAfter(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	q := open(t, b, defaults())
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateSucceeded, got.State)
	reqs := a.requests()
	require.Len(t, reqs, 2)
	gap := reqs[1].at.Sub(reqs[0].at)
	require.GreaterOrEqual(t, gap, 1900*time.Millisecond, "the retry waited %v, Retry-After said 2 s", gap)
	require.Equal(t, reqs[0].key, reqs[1].key)
}

// A replayed answer is final: a replayed error ends the intent failed,
// without another attempt.
func testReplayFinal(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"invoice already paid"}`))
	})
	q := open(t, b, defaults())
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateFailed, got.State)
	require.True(t, got.Replayed)
	require.Equal(t, http.StatusConflict, got.Status)
	require.Equal(t, 1, a.count(), "a replay is never retried")
}

// Through the idemkit server: the first answer is lost after the handler
// ran; the retry, with the same key, gets the stored answer as a replay, and
// the effect happened once.
func testReplayAfterLostAnswer(t *testing.T, b Backend) {
	s := newIdemServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}, func(n int) bool { return n == 1 })
	q := open(t, b, defaults())
	in := submit(t, q, post(s.url("/charges"), `{"amount":1}`))
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateSucceeded, got.State, "last error: %s", got.LastError)
	require.True(t, got.Replayed, "the second answer is the server's replay")
	require.Equal(t, `{"id":"ch_1"}`, string(got.Body))
	require.Equal(t, 1, s.effectsOf(in.Key), "the effect happened once")
	require.Equal(t, 2, s.count())
}

// A handler's own 409 (no Retry-After, not a replay, not the profile's
// in-progress answer) is a definitive answer: failed, not retried.
func testBusiness409Failed(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"invoice already paid"}`))
	})
	q := open(t, b, defaults())
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateFailed, got.State)
	require.False(t, got.Replayed)
	require.Equal(t, http.StatusConflict, got.Status)
	require.Equal(t, `{"error":"invoice already paid"}`, string(got.Body))
	require.Equal(t, 1, a.count())
}

// A lost answer followed by a 401 (which says nothing about the lost
// attempt) ends the intent outcome-unknown, never failed.
func testOutcomeUnknown(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			loseAnswer(w)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	q := open(t, b, defaults())
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateUnknown, got.State, "last error: %s", got.LastError)
	require.Equal(t, http.StatusUnauthorized, got.Status)
	require.Equal(t, 2, a.count())
}

// The attempt budget holds against a server that says "Retry-After: 0"
// forever: MaxAttemptsPerHour attempts, then the intent waits, pending.
func testBudget(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	o := defaults()
	o.MaxAttemptsPerHour = 3
	q := open(t, b, o)
	in := submit(t, q, post(a.url("/charges"), `{"amount":1}`))
	work(t, q)
	require.Eventually(t, func() bool { return a.count() >= 3 }, 60*time.Second, 10*time.Millisecond)
	require.Never(t, func() bool { return a.count() > 3 }, 2*time.Second, 50*time.Millisecond, "a fourth attempt within the hour")
	got, err := q.Get(testCtx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, StatePending, got.State)
	require.Equal(t, 3, got.Attempts)
}

// A worker killed (SIGKILL) while its attempt is on the wire is taken over by
// another process, with the same key; the idemkit server answers the
// takeover's attempts "in progress" until the first request's handler ends,
// then replays it: the effect happens once.
func testTakeover(t *testing.T, b Backend) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var runs sync.Mutex
	first := true
	s := newIdemServer(t, func(w http.ResponseWriter, r *http.Request) {
		runs.Lock()
		block := first
		first = false
		runs.Unlock()
		if block {
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}, nil)
	t.Cleanup(unblock) // before the server closes (cleanups run last first)

	o := defaults()
	q := open(t, b, o)
	in := submit(t, q, post(s.url("/charges"), `{"amount":1}`))
	child := spawn(t, b, q, o)
	select {
	case <-s.ran: // the claim is the server's: the effect is under way
	case <-time.After(60 * time.Second):
		t.Fatal("the worker process's attempt never reached the handler")
	}
	child.kill()

	work(t, q)
	require.Eventually(t, func() bool { return s.count() >= 2 }, 60*time.Second, 10*time.Millisecond, "no takeover")
	unblock()
	got := wait(t, q, in.ID)
	require.Equal(t, StateSucceeded, got.State, "last error: %s", got.LastError)
	require.True(t, got.Replayed, "the takeover got the first run's answer, replayed (status %d, attempts %d, requests %d, effects %d)", got.Status, got.Attempts, s.count(), s.effectsOf(in.Key))
	require.Equal(t, 1, s.effectsOf(in.Key), "the effect happened once")
	for i, r := range s.requests() {
		require.Equal(t, in.Key, r.key, "request %d", i+1)
	}
}

// Request and response bytes are preserved exactly.
func testBytesPreserved(t *testing.T, b Backend) {
	body := make([]byte, 0, 1024)
	for i := range 1024 {
		body = append(body, byte(i))
	}
	answer := bytes.Clone(body)
	for i, j := 0, len(answer)-1; i < j; i, j = i+1, j-1 {
		answer[i], answer[j] = answer[j], answer[i]
	}
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Location", "/charges/ch_ü1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(answer)
	})
	q := open(t, b, defaults())
	req := &Request{Method: http.MethodPut, URL: a.url("/blobs/é?x=1&y=%20z"), Body: body, Header: http.Header{
		"Content-Type": {"application/octet-stream"},
		"X-Note":       {"a, b", "ünïcode ✓"},
	}}
	in := submit(t, q, req)
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateSucceeded, got.State)
	require.Equal(t, http.StatusCreated, got.Status)
	require.Equal(t, answer, got.Body, "response body")
	require.Equal(t, "/charges/ch_ü1", got.Header.Get("Location"))
	reqs := a.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, body, reqs[0].body, "request body")
	require.Equal(t, []string{"a, b", "ünïcode ✓"}, reqs[0].header.Values("X-Note"))
	require.Equal(t, "application/octet-stream", reqs[0].header.Get("Content-Type"))
}

// Credentials are never stored: request headers given to Submit, the send
// hook's, and the response's cookies and tokens.
func testCredentialsNeverStored(t *testing.T, b Backend) {
	a := newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=resp-s3cr3t-4")
		w.Header().Set("X-Session-Token", "resp-s3cr3t-5")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	o := defaults()
	o.Credential = "hook-s3cr3t-3"
	q := open(t, b, o)
	req := post(a.url("/charges"), `{"amount":1}`)
	req.Header.Set("Authorization", "Bearer submit-s3cr3t-1")
	req.Header.Set("X-Api-Key", "submit-s3cr3t-2")
	in := submit(t, q, req)
	work(t, q)
	got := wait(t, q, in.ID)
	require.Equal(t, StateSucceeded, got.State)
	reqs := a.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "Bearer hook-s3cr3t-3", reqs[0].header.Get("Authorization"), "the send hook supplies the credential")
	require.Empty(t, got.Header.Values("Set-Cookie"))
	require.Empty(t, got.Header.Values("X-Session-Token"))

	stored, err := q.Stored(testCtx(t))
	require.NoError(t, err)
	require.NotEmpty(t, stored)
	require.True(t, bytes.Contains(stored, []byte(in.Key)), "Stored must return what the backend holds (the key at least)")
	require.False(t, bytes.Contains(stored, []byte("s3cr3t")), "a credential was stored")
}
