package idemkit

import (
	"github.com/google/uuid"
	"github.com/idemkit/idemkit/internal/testkit"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/stretchr/testify/require"
)

func TestClient_Do(t *testing.T) {
	t.Parallel()

	t.Run("Succeeds", func(t *testing.T) {
		t.Parallel()
		var gotKey, gotBody, gotCT string
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gotKey = r.Header.Get("Idempotency-Key")
			gotCT = r.Header.Get("Content-Type")
			body, _ := io.ReadAll(r.Body)
			gotBody = string(body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Set-Cookie", "session=secret")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":"ch_1"}`)
		}))
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL + "/charges", Body: []byte(`{"amount":40}`),
			Header: http.Header{"Content-Type": {"application/json"}}})
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, in.State)
		require.Equal(t, in.Key, gotKey)
		id, err := uuid.Parse(in.ID)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), id.Version(), "the id is a UUIDv7: time-ordered")
		require.Equal(t, in.ID, in.Key, "a minted key is the intent id")
		require.Equal(t, `{"amount":40}`, gotBody)
		require.Equal(t, "application/json", gotCT)
		require.Equal(t, http.MethodPost, in.Method)
		require.Equal(t, 1, in.Attempts)
		require.NotNil(t, in.Outcome)
		require.Equal(t, http.StatusCreated, in.Outcome.Status)
		require.Equal(t, `{"id":"ch_1"}`, string(in.Outcome.Body))
		require.False(t, in.Outcome.Replayed)
		require.Empty(t, in.Outcome.Header.Get("Set-Cookie"), "Set-Cookie is never stored")
		require.False(t, in.FirstAttemptAt.IsZero())
		require.True(t, in.Horizon.After(in.FirstAttemptAt))

		log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
		require.NoError(t, err)
		require.Len(t, log, 1)
		require.Equal(t, http.StatusCreated, log[0].Status)
		require.False(t, log[0].FinishedAt.IsZero())
	})

	t.Run("RetriesWithTheSameKey", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var keys []string
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			n := len(keys)
			mu.Unlock()
			switch n {
			case 1:
				// Not reused: net/http would otherwise resend the next
				// request itself after the hijack below (it treats requests
				// with an Idempotency-Key as replayable).
				w.Header().Set("Connection", "close")
				w.WriteHeader(http.StatusServiceUnavailable)
			case 2:
				// A dropped connection: the client cannot know what happened.
				hj, _ := w.(http.Hijacker)
				conn, _, _ := hj.Hijack()
				conn.Close()
			default:
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(http.StatusOK)
				fmt.Fprint(w, "done")
			}
		}))
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL, Key: "pay-42"})
		require.NoError(t, err)
		require.Equal(t, []string{"pay-42", "pay-42", "pay-42"}, keys)
		require.Equal(t, 3, in.Attempts)
		require.True(t, in.Outcome.Replayed)
		log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
		require.NoError(t, err)
		require.Len(t, log, 3)
		require.Equal(t, http.StatusServiceUnavailable, log[0].Status)
		require.Equal(t, 0, log[1].Status)
		require.NotEmpty(t, log[1].Error)
		require.True(t, log[2].Replayed)
		for i, a := range log {
			require.Equal(t, i+1, a.N)
			require.Equal(t, log[0].Token, a.Token, "one lease for the whole in-process loop")
		}
	})

	t.Run("409RetryAfterIsWaitedOut", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		var times []time.Time
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			times = append(times, time.Now())
			n := len(times)
			mu.Unlock()
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusConflict)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, in.State)
		require.Len(t, times, 2)
		require.GreaterOrEqual(t, times[1].Sub(times[0]), 900*time.Millisecond, "Retry-After: 1 honoured")
	})

	t.Run("422IsKeyReused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused"}`)
		}))
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
		require.ErrorIs(t, err, ErrKeyReused)
		var re *resultError
		require.ErrorAs(t, err, &re)
		require.Equal(t, in.ID, re.in.ID)
		require.Contains(t, err.Error(), in.ID, "the error names the intent")
		require.Equal(t, StateFailed, in.State)
		require.Equal(t, 1, in.Attempts, "422 is never retried")
		require.Contains(t, string(in.Outcome.Body), "key-reused")
	})

	t.Run("4xxFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad amount", http.StatusBadRequest)
		}))
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
		require.ErrorIs(t, err, StateFailed)
		require.NotErrorIs(t, err, ErrKeyReused)
		require.Equal(t, StateFailed, in.State)
		require.Equal(t, http.StatusBadRequest, in.Outcome.Status)
		require.Contains(t, in.LastError, "400")
	})

	t.Run("EmptyBodyIsNotChunked", func(t *testing.T) {
		t.Parallel()
		var cl int64 = -2
		var te []string
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cl, te = r.ContentLength, r.TransferEncoding
			w.WriteHeader(http.StatusNoContent)
		}))
		_, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
		require.NoError(t, err)
		require.EqualValues(t, 0, cl)
		require.Empty(t, te)
	})

	t.Run("RedirectIsDefinitive", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}))
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
		require.ErrorIs(t, err, StateFailed)
		require.Equal(t, http.StatusFound, in.Outcome.Status)
		require.EqualValues(t, 1, n.Load(), "a POST is never turned into a GET by a redirect")
	})

	t.Run("ContextEndsIntentStaysQueued", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusOK)
		}))
		defer close(release)
		ctx, cancel := context.WithCancel(testkit.Ctx(t))
		in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
		require.NoError(t, err)
		go func() {
			testkit.Eventually(t, 10*time.Second, func() bool {
				got, _ := b.c.Get(context.Background(), in.ID)
				return got != nil && got.Attempts == 1
			}, "first attempt started")
			cancel()
		}()
		_, err = b.c.driveID(ctx, in.ID)
		require.ErrorIs(t, err, context.Canceled)
		got, err := b.c.Get(testkit.Ctx(t), in.ID)
		require.NoError(t, err)
		require.Equal(t, StatePending, got.State)
		require.False(t, got.NextAttemptAt.After(time.Now()), "lease released for an immediate resume")
	})
}

func TestClient_PersistedBeforeFirstByte(t *testing.T) {
	t.Parallel()
	var b *testBundle
	type seen struct {
		state    string
		attempts int
		err      error
	}
	got := make(chan seen, 1)
	b = setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A connection of its own, as another process would have: the row
		// must already be committed (synchronous=FULL: on disk).
		db := rawDB(t, b.path)
		var s seen
		s.err = db.QueryRow(`SELECT state, attempts FROM idemkit_intents WHERE key = ?`,
			r.Header.Get("Idempotency-Key")).Scan(&s.state, &s.attempts)
		got <- s
		w.WriteHeader(http.StatusOK)
	}))
	_, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.NoError(t, err)
	s := <-got
	require.NoError(t, s.err)
	require.Equal(t, "pending", s.state)
	require.Equal(t, 1, s.attempts, "the attempt is recorded before it is sent")
}

func TestClient_CredentialsNeverStored(t *testing.T) {
	t.Parallel()
	const token = "Bearer sk_live_TOKEN-4242-never-on-disk"
	var mu sync.Mutex
	var auths []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		n := len(auths)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b := setup(t, nil, h)
	// In this process, Do keeps the credential in memory for every attempt.
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL, Header: http.Header{"Authorization": {token}, "X-Trace": {"t1"}}})
	require.NoError(t, err)
	require.Equal(t, []string{token, token}, auths)
	require.Empty(t, in.Header.Get("Authorization"))
	require.Equal(t, "t1", in.Header.Get("X-Trace"))

	// A Submit resumed by another Client gets it from the send hook.
	pending, err := b.c.Submit(testkit.Ctx(t), &Request{URL: b.srv.URL, Header: http.Header{"Authorization": {token}}})
	require.NoError(t, err)
	cfg := testConfig()
	cfg.SendHookFunc = func(_ string, r *http.Request) error { r.Header.Set("Authorization", "Bearer from-hook"); return nil }
	c2 := b.reopen(t, cfg)
	done, err := c2.driveID(testkit.Ctx(t), pending.ID)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, done.State)
	require.Equal(t, "Bearer from-hook", auths[len(auths)-1])

	require.NoError(t, b.c.Close())
	require.NoError(t, c2.Close())
	for _, suffix := range []string{"", "-wal", "-shm"} {
		raw, err := os.ReadFile(b.path + suffix)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		require.False(t, bytes.Contains(raw, []byte("TOKEN-4242")), "queue file%s holds the token", suffix)
	}
}

func TestClient_Submit(t *testing.T) {
	t.Parallel()

	t.Run("SameKeySameRequestIsTheSameIntent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil)
		req := &Request{URL: "http://127.0.0.1:1/x", Key: "k1", Body: []byte("a")}
		in1, err := b.c.Submit(testkit.Ctx(t), req)
		require.NoError(t, err)
		in2, err := b.c.Submit(testkit.Ctx(t), req)
		require.NoError(t, err)
		require.Equal(t, in1.ID, in2.ID)
		_, err = b.c.Submit(testkit.Ctx(t), &Request{URL: "http://127.0.0.1:1/x", Key: "k1", Body: []byte("b")})
		require.ErrorIs(t, err, ErrKeyReused)
	})

	t.Run("IdempotencyKeyHeaderIsTheKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil)
		in, err := b.c.Submit(testkit.Ctx(t), &Request{URL: "http://127.0.0.1:1/x", Header: http.Header{"Idempotency-Key": {"hk"}}})
		require.NoError(t, err)
		require.Equal(t, "hk", in.Key)
		require.Empty(t, in.Header.Get("Idempotency-Key"))
	})

	t.Run("InvalidRequestsQueueNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil)
		kept, err := b.c.Submit(testkit.Ctx(t), &Request{URL: "http://127.0.0.1:1/kept"})
		require.NoError(t, err)
		for name, req := range map[string]*Request{
			"nil":          nil,
			"no scheme":    {URL: "127.0.0.1/x"},
			"ftp":          {URL: "ftp://h/x"},
			"no host":      {URL: "http:///x"},
			"bad url":      {URL: "http://[::1"},
			"userinfo":     {URL: "https://user:pw@h/x"},
			"bad method":   {URL: "http://h/", Method: "PO ST"},
			"big body":     {URL: "http://h/", Body: make([]byte, maxBodySize+1)},
			"long key":     {URL: "http://h/", Key: strings.Repeat("k", 256)},
			"control key":  {URL: "http://h/", Key: "a\nb"},
			"header CRLF":  {URL: "http://h/", Header: http.Header{"X": {"a\r\nb"}}},
			"header name":  {URL: "http://h/", Header: http.Header{"X Y": {"a"}}},
			"two key hdrs": {URL: "http://h/", Header: http.Header{"Idempotency-Key": {"a", "b"}}},
		} {
			_, err := b.c.Submit(testkit.Ctx(t), req)
			require.ErrorIs(t, err, ErrInvalidRequest, name)
		}
		all, err := b.c.List(testkit.Ctx(t), nil)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, kept.ID, all[0].ID)
	})

	t.Run("AfterClose", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil)
		require.NoError(t, b.c.Close())
		_, err := b.c.Submit(testkit.Ctx(t), &Request{URL: "http://h/"})
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, b.c.Run(testkit.Ctx(t)), ErrClosed)
	})
}

func TestClient_SubmitTx(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	tx, err := b.c.q.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	in, err := b.c.SubmitTx(ctx, tx, &Request{URL: "http://127.0.0.1:1/a"})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	_, err = b.c.Get(ctx, in.ID)
	require.ErrorIs(t, err, ErrNotFound, "rolled back with the caller's transaction")

	tx, err = b.c.q.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	in, err = b.c.SubmitTx(ctx, tx, &Request{URL: "http://127.0.0.1:1/b"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	got, err := b.c.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, StatePending, got.State)
}

func TestClient_RunAndWait(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%3 == 0 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	runErr := make(chan error, 1)
	go func() { runErr <- b.c.Run(ctx) }()
	var ids []string
	for i := 0; i < 20; i++ {
		in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	for _, id := range ids {
		in, err := b.c.Wait(ctx, id)
		require.NoError(t, err)
		require.Equal(t, StateSucceeded, in.State)
	}
	cancel()
	require.NoError(t, <-runErr)
	counts, err := b.c.Counts(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[IntentState]int{StateSucceeded: 20}, counts)
}

func TestClient_Cancel(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	in, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/"})
	require.NoError(t, err)
	require.NoError(t, b.c.Cancel(ctx, in.ID))
	got, err := b.c.Wait(ctx, in.ID)
	require.ErrorIs(t, err, StateCanceled)
	require.Equal(t, StateCanceled, got.State)
	require.ErrorIs(t, b.c.Cancel(ctx, "nope"), ErrNotFound)
	_, err = b.c.Get(ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestClient_SendHookError(t *testing.T) {
	t.Parallel()
	var sent atomic.Int32
	cfg := testConfig()
	var fail atomic.Bool
	fail.Store(true)
	cfg.SendHookFunc = func(_ string, r *http.Request) error {
		if fail.Load() {
			fail.Store(false)
			return errors.New("token service down")
		}
		return nil
	}
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.NoError(t, err)
	require.EqualValues(t, 1, sent.Load(), "nothing sent while the hook failed")
	log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Contains(t, log[0].Error, "token service down")
}

type countingTransport struct {
	n  atomic.Int32
	rt http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// TestClient_OwnHTTPClient: a caller's http.Client carries every attempt,
// and the SDK's policy retries (its own 409 with Retry-After); the
// caller's go-retryablehttp LeveledLogger sees every attempt.
func TestClient_OwnHTTPClient(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	tr := &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone()}
	defer tr.rt.(*http.Transport).CloseIdleConnections()
	logger := &countingLogger{}
	cfg := testConfig()
	cfg.HTTPClient = &http.Client{Transport: tr}
	cfg.Logger = logger
	b := setup(t, cfg, srv)
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.NoError(t, err)
	require.Equal(t, 3, in.Attempts)
	require.EqualValues(t, 3, tr.n.Load(), "the caller's transport carried every attempt")
	require.EqualValues(t, 3, logger.attempts.Load(), "the caller's logger saw every attempt")
}

// countingLogger is a go-retryablehttp LeveledLogger counting the
// client's attempt logs.
type countingLogger struct{ attempts atomic.Int32 }

var _ retryablehttp.LeveledLogger = (*countingLogger)(nil)

func (l *countingLogger) Error(string, ...any) {}
func (l *countingLogger) Info(string, ...any)  {}
func (l *countingLogger) Warn(string, ...any)  {}
func (l *countingLogger) Debug(msg string, _ ...any) {
	if msg == "idemkit: attempt" {
		l.attempts.Add(1)
	}
}

// TestDo_Replayed422IsFailedNotKeyReused: a 422 replayed from the server's
// store (Idempotent-Replayed: true) is the handler's own answer to this very
// request, stored under this key: a definitive failure, not a reused key.
func TestDo_Replayed422IsFailedNotKeyReused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error":"amount must be positive"}`)
	}))
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.ErrorIs(t, err, StateFailed)
	require.NotErrorIs(t, err, ErrKeyReused)
	require.Equal(t, StateFailed, in.State)
	require.True(t, in.Outcome.Replayed)
	require.Equal(t, http.StatusUnprocessableEntity, in.Outcome.Status)
}

// TestAttempts_CancelDuringBackoffKeepsFinishedAttempt: canceling Do while it sleeps
// between two attempts must not overwrite the log entry of the attempt that
// already finished (its status).
func TestAttempts_CancelDuringBackoffKeepsFinishedAttempt(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 20 * time.Second }
	var calls atomic.Int32
	b := setup(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	ctx, cancel := context.WithCancel(testkit.Ctx(t))
	defer cancel()
	in, err := b.c.Submit(ctx, &Request{URL: b.srv.URL})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.c.Wait(ctx, in.ID)
		done <- err
	}()
	runDone := make(chan error, 1)
	go func() { runDone <- b.c.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, func() bool {
		log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
		return err == nil && len(log) == 1 && !log[0].FinishedAt.IsZero()
	}, "first attempt logged, sleeping before the second")
	cancel()
	require.NoError(t, <-runDone)
	<-done
	log, err := b.c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, http.StatusServiceUnavailable, log[0].Status, "the finished attempt's status is kept")
	require.EqualValues(t, 1, calls.Load())
}

// TestClient_CloseStopsDo: Close cancels a Do in flight and waits for it;
// the intent stays queued.
func TestClient_CloseStopsDo(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{})
	var once sync.Once
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices a closed connection only then
		once.Do(func() { close(entered) })
		<-r.Context().Done()
	}))
	errc := make(chan error, 1)
	go func() {
		_, err := b.c.Do(context.Background(), &Request{URL: b.srv.URL, Body: []byte("x")})
		errc <- err
	}()
	<-entered
	require.NoError(t, b.c.Close())
	require.ErrorIs(t, <-errc, ErrClosed)
	c2 := b.reopen(t, nil)
	got, err := c2.List(testkit.Ctx(t), &ListOptions{State: StatePending})
	require.NoError(t, err)
	require.Len(t, got, 1, "still queued")
}
