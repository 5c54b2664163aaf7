package paymentsapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
)

type testBundle struct {
	app    *App
	srv    *httptest.Server
	client *http.Client
	logs   *testkit.SyncBuffer
}

// setup opens an App with cfg, lets adjust change its handlers before any
// request, and serves it on an httptest server.
func setup(t *testing.T, cfg *Config, adjust func(h *handlers)) *testBundle {
	t.Helper()
	b := &testBundle{logs: &testkit.SyncBuffer{}}
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	app, err := Open(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	if adjust != nil {
		adjust(app.handlers)
	}
	b.app = app
	b.srv = httptest.NewServer(app.Handler())
	t.Cleanup(b.srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	b.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return b
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; account and key are left out when empty.
func (b *testBundle) do(t *testing.T, method, account, key, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.srv.URL+"/v1/payments", rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if account != "" {
		req.Header.Set("Authorization", "Bearer "+account)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, got}
}

func (b *testBundle) pay(t *testing.T, account, key, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, account, key, body)
}

func (b *testBundle) list(t *testing.T, account string) []Payment {
	t.Helper()
	resp := b.do(t, http.MethodGet, account, "", "")
	require.Equal(t, http.StatusOK, resp.status, "GET /v1/payments: %s", resp.body)
	var out struct {
		Payments []Payment `json:"payments"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &out))
	require.NotNil(t, out.Payments, `"payments" must be a list, never null`)
	return out.Payments
}

type backendCase struct {
	name   string
	config func(t *testing.T) *Config
}

var backendCases = []backendCase{
	{"sqlite", func(t *testing.T) *Config {
		return &Config{DB: filepath.Join(t.TempDir(), "payments.db"), SweepInterval: -1}
	}},
	{"postgres", func(t *testing.T) *Config {
		return &Config{DSN: testpg.SchemaDSN(t), SweepInterval: -1}
	}},
	{"mysql", func(t *testing.T) *Config {
		return &Config{DSN: testmysql.URL(t), SweepInterval: -1}
	}},
}

// forEachBackend runs fn as parallel subtests on each backend in
// transactional mode.
func forEachBackend(t *testing.T, fn func(t *testing.T, cfg *Config)) {
	t.Helper()
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			fn(t, bc.config(t))
		})
	}
}

// forEachBackendAndMode is forEachBackend in both middleware modes.
func forEachBackendAndMode(t *testing.T, fn func(t *testing.T, cfg *Config)) {
	t.Helper()
	for _, bc := range backendCases {
		for _, mode := range []Mode{ModeTransactional, ModeLease} {
			t.Run(bc.name+"/"+string(mode), func(t *testing.T) {
				t.Parallel()
				cfg := bc.config(t)
				cfg.Mode = mode
				fn(t, cfg)
			})
		}
	}
}

func requireProblem(t *testing.T, resp response, status int, slug string) {
	t.Helper()
	testkit.RequireProblem(t, resp.status, resp.header, resp.body, status, slug)
}

const usd40 = `{"amount": 4000, "currency": "usd", "description": "groceries"}`

func TestPayments_Create(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		before := time.Now().Add(-time.Second)

		resp := b.pay(t, "alice", "key-1", usd40)
		require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
		require.Equal(t, "application/json", resp.header.Get("Content-Type"))
		require.Equal(t, "86400", resp.header.Get(wire.HeaderWindow))
		require.Empty(t, resp.header.Get(wire.HeaderReplayed))

		var fields map[string]any
		require.NoError(t, json.Unmarshal(resp.body, &fields))
		require.ElementsMatch(t, []string{"id", "account", "amount", "currency", "description", "created_at"}, keys(fields))

		var p Payment
		require.NoError(t, json.Unmarshal(resp.body, &p))
		require.True(t, strings.HasPrefix(p.ID, "pay_"), "id %q", p.ID)
		require.Equal(t, "alice", p.Account)
		require.EqualValues(t, 4000, p.Amount)
		require.Equal(t, "USD", p.Currency)
		require.Equal(t, "groceries", p.Description)
		require.True(t, p.CreatedAt.After(before), "created_at %v", p.CreatedAt)

		require.Equal(t, []Payment{p}, b.list(t, "alice"), "the listed payment must equal the created one")
	})
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestPayments_Replay(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)

		first := b.pay(t, "alice", "key-1", usd40)
		require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
		// Same request, different JSON spelling: the fingerprint is of the
		// canonical JSON.
		again := b.pay(t, "alice", "key-1", `{"description":"groceries","currency":"usd","amount":4000}`)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Equal(t, string(first.body), string(again.body), "a replay is byte for byte the first response")

		require.Len(t, b.list(t, "alice"), 1, "a replay must not make a second payment")

		logs := b.logs.String()
		require.Contains(t, logs, "outcome=executed")
		require.Contains(t, logs, "outcome=replayed")
		require.Contains(t, logs, "key="+redact.Hash("key-1"), "keys are logged hashed")
		require.Contains(t, logs, "principal="+redact.Hash("alice"), "principals are logged hashed")
	})
}

func TestPayments_KeyReused(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)

		require.Equal(t, http.StatusCreated, b.pay(t, "alice", "key-1", usd40).status)
		resp := b.pay(t, "alice", "key-1", `{"amount": 9999, "currency": "USD"}`)
		requireProblem(t, resp, http.StatusUnprocessableEntity, wire.ProblemKeyReused)

		ps := b.list(t, "alice")
		require.Len(t, ps, 1)
		require.EqualValues(t, 4000, ps[0].Amount)
		require.Contains(t, b.logs.String(), "outcome=mismatch")
	})
}

func TestPayments_InvalidBody(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		for i, body := range []string{
			`not json`,
			`[]`,
			`{"amount": 0, "currency": "USD"}`,
			`{"amount": -5, "currency": "USD"}`,
			`{"amount": 1.5, "currency": "USD"}`,
			`{"amount": 1e3, "currency": "USD"}`,
			`{"amount": "100", "currency": "USD"}`,
			`{"amount": 99999999999999999999, "currency": "USD"}`,
			`{"currency": "USD"}`,
			`{"amount": 100}`,
			`{"amount": 100, "currency": "US"}`,
			`{"amount": 100, "currency": "U$D"}`,
			`{"amount": 100, "currency": "USD", "tip": 5}`,
			`{"amount": 100, "currency": "USD"} {}`,
			`{"amount": 100, "currency": "USD", "description": 7}`,
			`{"amount": 100, "currency": "USD", "description": "` + strings.Repeat("x", maxDescriptionRunes+1) + `"}`,
		} {
			resp := b.pay(t, "alice", fmt.Sprint("bad-", i), body)
			requireProblem(t, resp, http.StatusBadRequest, problemInvalidPayment)
		}
		require.Empty(t, b.list(t, "alice"))
	})
}

// A validation failure stores nothing: the corrected request with the same
// key is processed, instead of a 422 for the changed body.
func TestPayments_InvalidBodyIsNotStored(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		requireProblem(t, b.pay(t, "alice", "fix-1", `{"amount": 0, "currency": "USD"}`), http.StatusBadRequest, problemInvalidPayment)
		resp := b.pay(t, "alice", "fix-1", usd40)
		require.Equal(t, http.StatusCreated, resp.status, "body %s", resp.body)
		require.Len(t, b.list(t, "alice"), 1)
	})
}

func TestPayments_Unauthenticated(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)

		requireProblem(t, b.pay(t, "", "key-1", usd40), http.StatusUnauthorized, wire.ProblemUnauthenticated)
		requireProblem(t, b.do(t, http.MethodGet, "", "", ""), http.StatusUnauthorized, wire.ProblemUnauthenticated)
		requireProblem(t, b.pay(t, "bad account!", "key-1", usd40), http.StatusUnauthorized, wire.ProblemUnauthenticated)

		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/payments", strings.NewReader(usd40))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Basic YWxpY2U6eA==")
		req.Header.Set("Idempotency-Key", "key-1")
		resp, err := b.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}

func TestPayments_ListOnlyOwnOldestFirst(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		var mu sync.Mutex
		clock := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		b := setup(t, cfg, func(h *handlers) {
			h.timeNowFunc = func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				clock = clock.Add(-time.Minute) // later requests get earlier clocks...
				return clock
			}
		})
		// ...so the list order must come from created_at, not insertion.
		for i, account := range []string{"alice", "bob", "alice", "alice"} {
			body := fmt.Sprintf(`{"amount": %d, "currency": "EUR"}`, i+1)
			require.Equal(t, http.StatusCreated, b.pay(t, account, fmt.Sprint("k", i), body).status)
		}

		alice := b.list(t, "alice")
		require.Len(t, alice, 3)
		var amounts []int64
		for _, p := range alice {
			require.Equal(t, "alice", p.Account)
			amounts = append(amounts, p.Amount)
		}
		require.Equal(t, []int64{4, 3, 1}, amounts, "oldest first")
		require.True(t, alice[0].CreatedAt.Before(alice[1].CreatedAt))

		bob := b.list(t, "bob")
		require.Len(t, bob, 1)
		require.Equal(t, "bob", bob[0].Account)
		require.Empty(t, b.list(t, "carol"))
	})
}

func TestPayments_SameKeyTwoAccounts(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)

		a := b.pay(t, "alice", "shared-key", usd40)
		c := b.pay(t, "bob", "shared-key", usd40)
		require.Equal(t, http.StatusCreated, a.status)
		require.Equal(t, http.StatusCreated, c.status)
		require.Empty(t, c.header.Get(wire.HeaderReplayed), "bob must never get alice's response")
		require.NotEqual(t, string(a.body), string(c.body))
		require.Len(t, b.list(t, "alice"), 1)
		require.Len(t, b.list(t, "bob"), 1)
	})
}

// TestPayments_ServerErrorFreesKey makes an insert fail (a duplicate payment
// id) and checks that nothing was kept: the retry with the same key runs
// the handler again and succeeds.
func TestPayments_ServerErrorFreesKey(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		var mu sync.Mutex
		ids := []string{"pay_dup", "pay_dup"}
		b := setup(t, cfg, func(h *handlers) {
			h.newIDFunc = func() (string, error) {
				mu.Lock()
				defer mu.Unlock()
				if len(ids) > 0 {
					id := ids[0]
					ids = ids[1:]
					return id, nil
				}
				return newPaymentID()
			}
		})

		require.Equal(t, http.StatusCreated, b.pay(t, "alice", "k1", usd40).status)
		requireProblem(t, b.pay(t, "alice", "k2", usd40), http.StatusInternalServerError, problemInternal)
		retry := b.pay(t, "alice", "k2", usd40)
		require.Equal(t, http.StatusCreated, retry.status, "body: %s", retry.body)
		require.Empty(t, retry.header.Get(wire.HeaderReplayed), "a 500 is never stored")
		require.Len(t, b.list(t, "alice"), 2)
	})
}

func TestPayments_DelayGivesUpOnShutdown(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		cfg.Delay = time.Hour
		inDelay := make(chan struct{}, 1)
		cfg.OnChargeStartFunc = func(string, string) { inDelay <- struct{}{} }
		b := setup(t, cfg, nil)

		got := make(chan response, 1)
		go func() { got <- b.pay(t, "alice", "k1", usd40) }()
		<-inDelay
		b.app.StopHandlers()
		resp := <-got
		requireProblem(t, resp, http.StatusServiceUnavailable, problemShuttingDown)
		require.Equal(t, "1", resp.header.Get("Retry-After"))
		require.Empty(t, b.list(t, "alice"))
	})
}

func TestPayments_DelayFinishesWithoutClient(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		cfg.Delay = 50 * time.Millisecond
		inDelay := make(chan struct{}, 1)
		cfg.OnChargeStartFunc = func(string, string) { inDelay <- struct{}{} }
		b := setup(t, cfg, nil)

		ctx, cancel := contextWithCancel(t)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/payments", strings.NewReader(usd40))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k1")
		errc := make(chan error, 1)
		go func() {
			resp, err := b.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		<-inDelay
		cancel() // the client gives up while the handler waits
		require.Error(t, <-errc)

		ps := waitForPayments(t, b, "alice", 1)
		replay := b.pay(t, "alice", "k1", usd40)
		require.Equal(t, http.StatusCreated, replay.status)
		require.Equal(t, "true", replay.header.Get(wire.HeaderReplayed))
		var p Payment
		require.NoError(t, json.Unmarshal(replay.body, &p))
		require.Equal(t, ps[0].ID, p.ID, "the retry gets the payment the lost client made")
	})
}

func TestPayments_AbortOnDisconnect(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		cfg.Delay = time.Hour
		cfg.AbortOnDisconnect = true
		inDelay := make(chan struct{}, 1)
		cfg.OnChargeStartFunc = func(string, string) { inDelay <- struct{}{} }
		b := setup(t, cfg, nil)

		ctx, cancel := contextWithCancel(t)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/payments", strings.NewReader(usd40))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k1")
		errc := make(chan error, 1)
		go func() {
			resp, err := b.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		<-inDelay
		cancel()
		require.Error(t, <-errc)

		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(b.logs.String(), "outcome=released") {
			require.True(t, time.Now().Before(deadline), "the handler never gave up; logs:\n%s", b.logs.String())
			time.Sleep(5 * time.Millisecond) // polling with a deadline
		}
		require.Empty(t, b.list(t, "alice"))
	})
}

func waitForPayments(t *testing.T, b *testBundle, account string, n int) []Payment {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := b.list(t, account)
		if len(ps) >= n {
			require.Len(t, ps, n)
			return ps
		}
		require.True(t, time.Now().Before(deadline), "got %d payments want %d", len(ps), n)
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
}

// TestPayments_ConcurrentSameKey sends one payment many times at once, as
// an impatient client would: exactly one runs, the others are told it is in
// flight (409) or get its stored response.
func TestPayments_ConcurrentSameKey(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		cfg.Delay = 20 * time.Millisecond
		b := setup(t, cfg, nil)

		const n = 8
		results := make(chan response, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { results <- b.pay(t, "alice", "same", usd40) })
		}
		wg.Wait()
		close(results)
		created := 0
		var body string
		for r := range results {
			switch r.status {
			case http.StatusCreated:
				created++
				if body == "" {
					body = string(r.body)
				}
				require.Equal(t, body, string(r.body), "every 201 carries the one payment")
			case http.StatusConflict:
				requireProblem(t, r, http.StatusConflict, wire.ProblemInFlight)
				require.NotEmpty(t, r.header.Get("Retry-After"))
			default:
				t.Fatalf("got status %d want 201 or 409: %s", r.status, r.body)
			}
		}
		require.Positive(t, created)
		require.Len(t, b.list(t, "alice"), 1, "one intent, one payment")
		require.Equal(t, 1, strings.Count(b.logs.String(), "outcome=executed"))
	})
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}
