package faultproxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/faultproxy"
)

type testBundle struct {
	upstream *httptest.Server
	hits     atomic.Int64
	mu       sync.Mutex
	bodies   []string // request bodies the upstream read in full
	proxy    *faultproxy.Proxy
	client   *http.Client
}

// setup starts an upstream that counts requests and answers 201 with a JSON
// body naming the path, a proxy in front of it configured by cfg (Upstream
// is filled in), and a client without keep-alives, so that the transport
// never resends a request on its own.
func setup(t *testing.T, cfg faultproxy.Config) *testBundle {
	t.Helper()
	b := &testBundle{}
	b.upstream = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.hits.Add(1)
		b.mu.Lock()
		b.bodies = append(b.bodies, string(body))
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"path":%q,"query":%q,"body":%q,"pad":%q}`, r.URL.Path, r.URL.RawQuery, body, strings.Repeat("x", 64))
	}))
	t.Cleanup(b.upstream.Close)
	cfg.Upstream = b.upstream.URL
	p, err := faultproxy.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	b.proxy = p
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	b.client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return b
}

func (b *testBundle) post(t *testing.T, path, key, body string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.proxy.URL()+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp, got, err
}

// requireHangUp asserts err is what a client sees when the server closes or
// resets the connection without answering.
func requireHangUp(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	ok := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
	require.True(t, ok, "got %v want EOF, unexpected EOF or connection reset", err)
}

func TestStart_InvalidConfig(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name  string
		cfg   faultproxy.Config
		field string
	}{
		{"no upstream", faultproxy.Config{}, "Upstream"},
		{"not loopback", faultproxy.Config{Upstream: "http://192.0.2.1:80"}, "Upstream"},
		{"hostname not loopback", faultproxy.Config{Upstream: "http://example.com"}, "Upstream"},
		{"bad scheme", faultproxy.Config{Upstream: "ftp://127.0.0.1:21"}, "Upstream"},
		{"query", faultproxy.Config{Upstream: "http://127.0.0.1:1/?a=b"}, "Upstream"},
		{"bad mode", faultproxy.Config{Upstream: "http://127.0.0.1:1", Mode: "random"}, "Mode"},
		{"negative rate", faultproxy.Config{Upstream: "http://127.0.0.1:1", Rates: faultproxy.Rates{Reset: -0.1}}, "Rates.Reset"},
		{"rate over one", faultproxy.Config{Upstream: "http://127.0.0.1:1", Rates: faultproxy.Rates{Delay: 1.5}}, "Rates.Delay"},
		{"NaN rate", faultproxy.Config{Upstream: "http://127.0.0.1:1", Rates: faultproxy.Rates{SlowWrite: math.NaN()}}, "Rates.SlowWrite"},
		{"sum over one", faultproxy.Config{Upstream: "http://127.0.0.1:1", Rates: faultproxy.Rates{DropResponse: 0.6, Unavailable: 0.6}}, "sum"},
		{"negative delay", faultproxy.Config{Upstream: "http://127.0.0.1:1", MaxDelay: -time.Second}, "MaxDelay"},
		{"huge delay", faultproxy.Config{Upstream: "http://127.0.0.1:1", MaxDelay: time.Hour}, "MaxDelay"},
		{"negative retry-after", faultproxy.Config{Upstream: "http://127.0.0.1:1", RetryAfter: -time.Second}, "RetryAfter"},
		{"negative chunk", faultproxy.Config{Upstream: "http://127.0.0.1:1", ChunkSize: -1}, "ChunkSize"},
		{"huge pause", faultproxy.Config{Upstream: "http://127.0.0.1:1", ChunkPause: time.Minute}, "ChunkPause"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := faultproxy.Start(tc.cfg)
			require.ErrorIs(t, err, faultproxy.ErrInvalidConfig)
			require.Nil(t, p)
			require.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestConfig_WithDefaults(t *testing.T) {
	t.Parallel()

	c := (*faultproxy.Config)(nil).WithDefaults()
	require.Equal(t, faultproxy.ModeSequence, c.Mode)
	require.Equal(t, faultproxy.MaxDelayDefault, c.MaxDelay)
	require.Equal(t, faultproxy.RetryAfterDefault, c.RetryAfter)
	require.Equal(t, faultproxy.ChunkSizeDefault, c.ChunkSize)
	require.Equal(t, faultproxy.ChunkPauseDefault, c.ChunkPause)

	in := &faultproxy.Config{ChunkSize: 3}
	out := in.WithDefaults()
	require.Equal(t, 3, out.ChunkSize)
	require.Empty(t, in.Mode, "WithDefaults must not modify its receiver")
}

func TestProxy_Pass(t *testing.T) {
	t.Parallel()
	b := setup(t, faultproxy.Config{})

	resp, body, err := b.post(t, "/v1/payments?x=1", "k1", `{"amount":1}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "yes", resp.Header.Get("X-Upstream"))
	require.JSONEq(t, `{"path":"/v1/payments","query":"x=1","body":"{\"amount\":1}","pad":"`+strings.Repeat("x", 64)+`"}`, string(body))
	require.EqualValues(t, 1, b.hits.Load())

	log := b.proxy.Log()
	require.Len(t, log, 1)
	require.Equal(t, faultproxy.Record{
		Seq: 1, Method: "POST", Path: "/v1/payments", Key: "k1", Attempt: 1,
		Action: faultproxy.ActionPass, UpstreamStatus: http.StatusCreated,
	}, log[0])
	require.Equal(t, 1, b.proxy.Counts()[faultproxy.ActionPass])
}

func TestProxy_DropResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{DropResponse: 1}})

	_, _, err := b.post(t, "/v1/payments", "k1", `{"amount":1}`)
	requireHangUp(t, err)
	require.EqualValues(t, 1, b.hits.Load(), "the upstream must have handled the request once")
	b.mu.Lock()
	require.Equal(t, []string{`{"amount":1}`}, b.bodies)
	b.mu.Unlock()

	log := b.proxy.Log()
	require.Len(t, log, 1)
	require.Equal(t, faultproxy.ActionDropResponse, log[0].Action)
	require.Equal(t, http.StatusCreated, log[0].UpstreamStatus)
	require.Empty(t, log[0].Err)
}

func TestProxy_Reset(t *testing.T) {
	t.Parallel()
	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{Reset: 1}})

	_, _, err := b.post(t, "/v1/payments", "k1", `{"amount":1}`)
	requireHangUp(t, err)
	require.Zero(t, b.hits.Load(), "the upstream must never see a reset request")

	log := b.proxy.Log()
	require.Len(t, log, 1)
	require.Equal(t, faultproxy.ActionReset, log[0].Action)
	require.Zero(t, log[0].UpstreamStatus)
	require.Equal(t, 1, b.proxy.Counts()[faultproxy.ActionReset])
}

func TestProxy_Unavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{Unavailable: 1}, RetryAfter: 1500 * time.Millisecond})

	resp, body, err := b.post(t, "/v1/payments", "k1", `{"amount":1}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"), "1.5s rounds up to whole seconds")
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Contains(t, string(body), `"status":503`)
	require.Zero(t, b.hits.Load(), "a 503 from the proxy must not be forwarded")

	log := b.proxy.Log()
	require.Len(t, log, 1)
	require.Equal(t, faultproxy.ActionUnavailable, log[0].Action)
	require.Zero(t, log[0].UpstreamStatus)
}

func TestProxy_Delay(t *testing.T) {
	t.Parallel()
	const maxDelay = 20 * time.Millisecond
	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{Delay: 1}, MaxDelay: maxDelay})

	var delays []time.Duration
	for i := range 10 {
		resp, body, err := b.post(t, "/p", fmt.Sprint("k", i), `{}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Contains(t, string(body), `"path":"/p"`)
	}
	require.EqualValues(t, 10, b.hits.Load())
	for _, rec := range b.proxy.Log() {
		require.Equal(t, faultproxy.ActionDelay, rec.Action)
		require.Equal(t, http.StatusCreated, rec.UpstreamStatus)
		require.GreaterOrEqual(t, rec.Delay, time.Duration(0))
		require.LessOrEqual(t, rec.Delay, maxDelay)
		delays = append(delays, rec.Delay)
	}
	require.NotEqual(t, delays[0], delays[1], "seeded delays should vary between requests")
}

func TestProxy_SlowWrite(t *testing.T) {
	t.Parallel()
	const chunk = 7
	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{SlowWrite: 1}, ChunkSize: chunk, ChunkPause: time.Microsecond})

	resp, body, err := b.post(t, "/p", "k", `{"a":"b"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "yes", resp.Header.Get("X-Upstream"))
	require.JSONEq(t, `{"path":"/p","query":"","body":"{\"a\":\"b\"}","pad":"`+strings.Repeat("x", 64)+`"}`, string(body))

	log := b.proxy.Log()
	require.Len(t, log, 1)
	require.Equal(t, faultproxy.ActionSlowWrite, log[0].Action)
	require.Equal(t, (len(body)+chunk-1)/chunk, log[0].Chunks)
	require.Empty(t, log[0].Err)
}

// actions sends n sequential requests (keys k0..k{n-1}) through a new proxy
// with cfg and returns the action of each, in order.
func actions(t *testing.T, cfg faultproxy.Config, n int) []faultproxy.Action {
	t.Helper()
	b := setup(t, cfg)
	for i := range n {
		_, _, _ = b.post(t, "/p", fmt.Sprint("k", i), `{}`)
	}
	var out []faultproxy.Action
	for i, rec := range b.proxy.Log() {
		require.EqualValues(t, i+1, rec.Seq)
		out = append(out, rec.Action)
	}
	require.Len(t, out, n)
	return out
}

var mixedRates = faultproxy.Rates{DropResponse: 0.1, Reset: 0.1, Unavailable: 0.1, Delay: 0.1, SlowWrite: 0.1}

func TestProxy_SameSeedSameDecisions(t *testing.T) {
	t.Parallel()

	cfg := faultproxy.Config{Seed: 12345, Rates: mixedRates, MaxDelay: time.Millisecond, ChunkPause: time.Microsecond}
	first := actions(t, cfg, 150)
	second := actions(t, cfg, 150)
	require.Equal(t, first, second, "same seed must give the same sequence of decisions")

	seen := map[faultproxy.Action]bool{}
	for _, a := range first {
		seen[a] = true
	}
	for _, a := range faultproxy.Actions {
		require.True(t, seen[a], "action %s never fired in 150 requests at rate 0.1 or more", a)
	}

	cfg.Seed = 54321
	other := actions(t, cfg, 150)
	require.NotEqual(t, first, other, "a different seed should give a different sequence")
}

func TestProxy_KeyedModeIgnoresOrder(t *testing.T) {
	t.Parallel()

	cfg := faultproxy.Config{Seed: 7, Mode: faultproxy.ModeKeyed, Rates: mixedRates, MaxDelay: time.Millisecond, ChunkPause: time.Microsecond}
	const keys, attempts = 20, 3

	byKeyAttempt := func(order []string) map[string]faultproxy.Action {
		b := setup(t, cfg)
		for _, key := range order {
			_, _, _ = b.post(t, "/p", key, `{}`)
		}
		out := map[string]faultproxy.Action{}
		for _, rec := range b.proxy.Log() {
			out[fmt.Sprintf("%s#%d", rec.Key, rec.Attempt)] = rec.Action
		}
		require.Len(t, out, keys*attempts)
		return out
	}
	var keyMajor, attemptMajorReversed []string
	for k := range keys {
		for range attempts {
			keyMajor = append(keyMajor, fmt.Sprint("key-", k))
		}
	}
	for range attempts {
		for k := keys - 1; k >= 0; k-- {
			attemptMajorReversed = append(attemptMajorReversed, fmt.Sprint("key-", k))
		}
	}
	require.Equal(t, byKeyAttempt(keyMajor), byKeyAttempt(attemptMajorReversed), "keyed decisions must not depend on request order")
}

func TestProxy_ZeroRatesNeverFire(t *testing.T) {
	t.Parallel()

	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{DropResponse: 0.5, Unavailable: 0.5}})
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, _, _ = b.post(t, "/p", fmt.Sprint("k", i), `{}`) })
	}
	wg.Wait()

	c := b.proxy.Counts()
	require.Zero(t, c[faultproxy.ActionPass], "rates summing to 1 leave nothing to pass")
	require.Zero(t, c[faultproxy.ActionReset])
	require.Zero(t, c[faultproxy.ActionDelay])
	require.Zero(t, c[faultproxy.ActionSlowWrite])
	require.Equal(t, n, c[faultproxy.ActionDropResponse]+c[faultproxy.ActionUnavailable])
	require.Positive(t, c[faultproxy.ActionDropResponse])
	require.Positive(t, c[faultproxy.ActionUnavailable])
	require.EqualValues(t, c[faultproxy.ActionDropResponse], b.hits.Load())
}

func TestProxy_DefaultRatesPassEverything(t *testing.T) {
	t.Parallel()

	b := setup(t, faultproxy.Config{Seed: 99})
	for i := range 50 {
		resp, _, err := b.post(t, "/p", fmt.Sprint("k", i), `{}`)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	require.Equal(t, 50, b.proxy.Counts()[faultproxy.ActionPass])
}

// TestProxy_Concurrent hammers the proxy from many goroutines over
// keep-alive connections and checks the bookkeeping: every request is
// recorded once with a unique Seq, and the upstream saw exactly the
// requests the records say were forwarded.
func TestProxy_Concurrent(t *testing.T) {
	t.Parallel()

	b := setup(t, faultproxy.Config{Seed: 3, Rates: mixedRates, MaxDelay: time.Millisecond, ChunkPause: time.Microsecond})
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.proxy.URL()+"/p", strings.NewReader(`{}`))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Idempotency-Key", fmt.Sprintf("g%d-%d", g, i))
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				_ = b.proxy.Counts()
			}
		})
	}
	wg.Wait()

	log := b.proxy.Log()
	require.GreaterOrEqual(t, len(log), 8*40, "the transport may resend replayable requests, never fewer")
	forwarded := 0
	for i, rec := range log {
		require.EqualValues(t, i+1, rec.Seq)
		if rec.UpstreamStatus != 0 {
			forwarded++
		}
	}
	require.EqualValues(t, forwarded, b.hits.Load())
	total := 0
	for _, n := range b.proxy.Counts() {
		total += n
	}
	require.Equal(t, len(log), total)
}

func TestProxy_DecideFunc(t *testing.T) {
	t.Parallel()

	b := setup(t, faultproxy.Config{DecideFunc: func(info faultproxy.RequestInfo) faultproxy.Action {
		if info.Key == "a" && info.Attempt == 1 {
			return faultproxy.ActionDropResponse
		}
		if info.Key == "bad" {
			return "explode"
		}
		return faultproxy.ActionPass
	}})

	_, _, err := b.post(t, "/p", "a", `{}`)
	requireHangUp(t, err)
	resp, _, err := b.post(t, "/p", `"a"`, `{}`) // the quoted spelling is the same key
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	resp, _, err = b.post(t, "/p", "bad", `{}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	log := b.proxy.Log()
	require.Len(t, log, 3)
	require.Equal(t, faultproxy.ActionDropResponse, log[0].Action)
	require.Equal(t, 2, log[1].Attempt)
	require.Equal(t, "a", log[1].Key)
	require.Equal(t, faultproxy.ActionPass, log[2].Action)
	require.Contains(t, log[2].Err, "unknown action")
	require.EqualValues(t, 3, b.hits.Load())
}

func TestProxy_Logger(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	b := setup(t, faultproxy.Config{Rates: faultproxy.Rates{Unavailable: 1}, Logger: logger})

	_, _, err := b.post(t, "/p", "key-1", `{}`)
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	line := buf.String()
	require.Contains(t, line, `"action":"unavailable"`)
	require.Contains(t, line, `"key":"key-1"`)
	require.Contains(t, line, `"seq":1`)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestProxy_CloseCancelsInFlight(t *testing.T) {
	t.Parallel()

	entered := make(chan struct{})
	released := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // held until the proxy gives up on the request
		close(released)
	}))
	t.Cleanup(upstream.Close)
	p, err := faultproxy.Start(faultproxy.Config{Upstream: upstream.URL})
	require.NoError(t, err)

	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, p.URL()+"/slow", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	require.NoError(t, p.Close())
	require.Error(t, <-errc, "the client must not get an answer after Close")
	<-released
	require.NoError(t, p.Close(), "Close is idempotent")

	log := p.Log()
	require.Len(t, log, 1, "Close waits for in-flight requests to be recorded")
	require.NotEmpty(t, log[0].Err)

	_, err = client.Get(p.URL() + "/after")
	require.Error(t, err, "a closed proxy accepts nothing")
}
