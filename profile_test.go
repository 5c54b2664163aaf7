package idemkit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// scripted is an httptest server that answers attempt i with answers[i]
// (the last one over and over) and records the key header of each request.
type scripted struct {
	srv     *httptest.Server
	header  string
	mu      sync.Mutex
	keys    []string
	answers []func(w http.ResponseWriter)
	n       atomic.Int32
}

func newScripted(t *testing.T, keyHeader string, answers ...func(w http.ResponseWriter)) *scripted {
	t.Helper()
	s := &scripted{header: keyHeader, answers: answers}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(s.n.Add(1)) - 1
		s.mu.Lock()
		s.keys = append(s.keys, strings.Join(r.Header.Values(s.header), "|"))
		s.mu.Unlock()
		s.answers[min(i, len(s.answers)-1)](w)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) hostPort(t *testing.T) string {
	u, err := url.Parse(s.srv.URL)
	require.NoError(t, err)
	return u.Host
}

func (s *scripted) sentKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// answer writes status with headers (name, value pairs) and body.
func answer(status int, body string, h ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(h); i += 2 {
			w.Header().Set(h[i], h[i+1])
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

func mustProfile(t *testing.T, name string) Profile {
	t.Helper()
	p, ok := KnownProfile(name)
	require.True(t, ok, name)
	return p
}

// dialectClient opens a queue whose Config.Profiles maps s's host:port to
// the named profile.
func dialectClient(t *testing.T, s *scripted, name string, cfg *Config) *Client {
	t.Helper()
	if cfg == nil {
		cfg = testConfig()
	}
	cfg.Profiles = map[string]Profile{s.hostPort(t): mustProfile(t, name)}
	return setup(t, cfg, nil).c
}

func shortCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestProfile_Stripe answers as https://docs.stripe.com/api/idempotent_requests
// and https://docs.stripe.com/error-low-level#idempotency say: a concurrent
// request is 409 idempotency_key_in_use (retried), a reused key is 400
// idempotency_error (ErrKeyReused), a replay carries Idempotent-Replayed,
// keys are kept 24 hours.
func TestProfile_Stripe(t *testing.T) {
	t.Parallel()
	t.Run("in use, then the replayed charge", func(t *testing.T) {
		t.Parallel()
		s := newScripted(t, "Idempotency-Key",
			answer(http.StatusConflict, `{"error":{"code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key","type":"invalid_request_error"}}`, "Content-Type", "application/json"),
			answer(http.StatusOK, `{"id":"ch_1","object":"charge"}`, "Content-Type", "application/json", "Idempotent-Replayed", "true"))
		cfg := testConfig()
		cfg.Window = time.Hour
		c := dialectClient(t, s, "stripe", cfg)
		in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/v1/charges", Body: []byte("amount=2000&currency=usd")})
		require.NoError(t, err)
		require.Equal(t, 2, in.Attempts)
		require.True(t, in.Outcome.Replayed)
		require.Equal(t, []string{in.Key, in.Key}, s.sentKeys(), "sent bare")
		require.Equal(t, in.FirstAttemptAt.Add(24*time.Hour-time.Minute), in.Horizon, "Stripe's 24 h, not Config.Window")
	})
	t.Run("reused key", func(t *testing.T) {
		t.Parallel()
		s := newScripted(t, "Idempotency-Key",
			answer(http.StatusBadRequest, `{"error":{"message":"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than 'k1' if you meant to execute a different request.","type":"idempotency_error"}}`, "Content-Type", "application/json"))
		c := dialectClient(t, s, "stripe", nil)
		in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/v1/charges", Key: "k1"})
		require.ErrorIs(t, err, ErrKeyReused)
		require.Equal(t, StateFailed, in.State)
		require.Equal(t, 1, in.Attempts)
		got, err := c.Get(testkit.Ctx(t), in.ID)
		require.NoError(t, err)
		require.ErrorIs(t, result(got), ErrKeyReused, "the verdict is stored")
	})
	t.Run("rate limited", func(t *testing.T) {
		t.Parallel()
		s := newScripted(t, "Idempotency-Key",
			answer(http.StatusTooManyRequests, `{"error":{"message":"Too many requests hit the API too quickly.","type":"invalid_request_error","code":"rate_limit"}}`),
			answer(http.StatusOK, `{"id":"ch_2"}`))
		c := dialectClient(t, s, "stripe", nil)
		in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/v1/charges"})
		require.NoError(t, err)
		require.Equal(t, 2, in.Attempts)
	})
}

// TestProfile_Adyen answers as
// https://docs.adyen.com/development-resources/api-idempotency says: keys of
// at most 64 characters, valid for at least 31 days; the response echoes
// the key.
func TestProfile_Adyen(t *testing.T) {
	t.Parallel()
	s := newScripted(t, "Idempotency-Key", func(w http.ResponseWriter) {
		answer(http.StatusOK, `{"pspReference":"993617895204576J","resultCode":"Authorised"}`, "Content-Type", "application/json")(w)
	})
	c := dialectClient(t, s, "adyen", nil)
	in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/v71/payments"})
	require.NoError(t, err)
	require.Equal(t, in.FirstAttemptAt.Add(31*24*time.Hour-time.Minute), in.Horizon)
	_, err = c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/v71/payments", Key: strings.Repeat("k", 65)})
	require.ErrorIs(t, err, ErrInvalidRequest, "65 characters: over Adyen's 64")
}

// TestProfile_Checkout answers as
// https://www.checkout.com/docs/developer-resources/api/idempotency says: the
// key goes in Cko-Idempotency-Key; a concurrent request is 429 and should
// wait at least 30 s; a request that could not be processed (a validation
// error) is not saved.
func TestProfile_Checkout(t *testing.T) {
	t.Parallel()
	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		s := newScripted(t, "Cko-Idempotency-Key", answer(http.StatusTooManyRequests, ""))
		cfg := testConfig()
		cfg.MaxSleep = time.Second // persist the 30 s wait instead of sleeping it
		c := dialectClient(t, s, "checkout", cfg)
		in, err := c.Do(shortCtx(t, time.Second), &Request{URL: s.srv.URL + "/payments"})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, StatePending, in.State)
		log, err := c.Attempts(testkit.Ctx(t), in.ID)
		require.NoError(t, err)
		require.Len(t, log, 1)
		require.GreaterOrEqual(t, in.NextAttemptAt.Sub(log[0].StartedAt), 30*time.Second-time.Millisecond)
		require.Equal(t, []string{in.Key}, s.sentKeys())
	})
	t.Run("validation error", func(t *testing.T) {
		t.Parallel()
		s := newScripted(t, "Cko-Idempotency-Key", answer(http.StatusUnprocessableEntity,
			`{"request_id":"0HL80RJLS76I7","error_type":"request_invalid","error_codes":["payment_source_required"]}`, "Content-Type", "application/json"))
		c := dialectClient(t, s, "checkout", nil)
		in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/payments"})
		require.ErrorIs(t, err, StateFailed)
		require.NotErrorIs(t, err, ErrKeyReused)
		require.Equal(t, in.FirstAttemptAt.Add(24*time.Hour-time.Minute), in.Horizon)
	})
}

// TestProfile_PayPal answers as
// https://developer.paypal.com/api/rest/reference/idempotency says: the id
// goes in PayPal-Request-Id; a 5xx is retried with the same id; a repeated
// id returns the latest status of the earlier request.
func TestProfile_PayPal(t *testing.T) {
	t.Parallel()
	s := newScripted(t, "PayPal-Request-Id",
		answer(http.StatusInternalServerError, `{"name":"INTERNAL_SERVER_ERROR"}`),
		answer(http.StatusCreated, `{"id":"2GG279541U471931P","status":"COMPLETED"}`))
	c := dialectClient(t, s, "paypal", nil)
	in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL + "/v2/payments/authorizations/0VF52814937998046/capture"})
	require.NoError(t, err)
	require.Equal(t, []string{in.Key, in.Key}, s.sentKeys())
}

// TestProfile_IETF answers as draft-ietf-httpapi-idempotency-key-header
// says: 409 while the first request is processed;
// 422 for a key reused with another payload (and 417, as published
// middlewares answer it).
func TestProfile_IETF(t *testing.T) {
	t.Parallel()
	s := newScripted(t, "Idempotency-Key",
		answer(http.StatusConflict, `{"type":"https://developer.example.com/idempotency","title":"A request is outstanding for this Idempotency-Key"}`, "Content-Type", "application/problem+json"),
		answer(http.StatusCreated, `{}`))
	c := dialectClient(t, s, "ietf", nil)
	in, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL, Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"})
	require.NoError(t, err)
	require.Equal(t, 2, in.Attempts)
	require.Equal(t, []string{"8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"}, s.sentKeys(),
		"sent bare: a server that stores the value verbatim sees the key another tool sends")
	for _, status := range []int{http.StatusUnprocessableEntity, http.StatusExpectationFailed} {
		s := newScripted(t, "Idempotency-Key", answer(status, `{"title":"Idempotency-Key is already used"}`, "Content-Type", "application/problem+json"))
		c := dialectClient(t, s, "ietf", nil)
		_, err := c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL})
		require.ErrorIs(t, err, ErrKeyReused, "status %d", status)
	}
}

// TestProfile_ChosenPerHost: the profile of one host does not leak to
// another: a 400 idempotency_error is key reuse from the Stripe host only.
func TestProfile_ChosenPerHost(t *testing.T) {
	t.Parallel()
	body := `{"error":{"type":"idempotency_error"}}`
	stripe := newScripted(t, "Idempotency-Key", answer(http.StatusBadRequest, body))
	other := newScripted(t, "Idempotency-Key", answer(http.StatusBadRequest, body))
	c := dialectClient(t, stripe, "stripe", nil)
	_, err := c.Do(testkit.Ctx(t), &Request{URL: stripe.srv.URL})
	require.ErrorIs(t, err, ErrKeyReused)
	_, err = c.Do(testkit.Ctx(t), &Request{URL: other.srv.URL})
	require.ErrorIs(t, err, StateFailed)
	require.NotErrorIs(t, err, ErrKeyReused)
}

// TestProfile_ProvidersMoved: the profiles follow the providers' current
// pages: Stripe v2 keeps keys 30 days; Checkout.com answers a duplicate in
// flight with 409 (it was 429: both wait at least 30 s) and replays a
// processed one with 202 (a success); Adyen keeps keys 31 days.
func TestProfile_ProvidersMoved(t *testing.T) {
	t.Parallel()
	v2 := mustProfile(t, "stripe-v2")
	require.Equal(t, 30*24*time.Hour, v2.Window)
	require.Equal(t, "Idempotency-Key", v2.KeyHeader)
	require.Equal(t, 31*24*time.Hour, mustProfile(t, "adyen").Window)
	require.Equal(t, 24*time.Hour, mustProfile(t, "stripe").Window)

	s := newScripted(t, "Cko-Idempotency-Key",
		answer(http.StatusConflict, ""),
		answer(http.StatusAccepted, `{"id":"pay_1","status":"Authorized"}`, "Content-Type", "application/json"))
	cfg := testConfig()
	cfg.MaxSleep = time.Second // persist the 30 s wait instead of sleeping it
	c := dialectClient(t, s, "checkout", cfg)
	in, err := c.Do(shortCtx(t, time.Second), &Request{URL: s.srv.URL + "/payments"})
	require.ErrorIs(t, err, context.DeadlineExceeded, "the 409 is in flight, not a failure")
	require.Equal(t, StatePending, in.State)
	log, err := c.Attempts(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.GreaterOrEqual(t, in.NextAttemptAt.Sub(log[0].StartedAt), 30*time.Second-time.Millisecond)
	// Due now: the duplicate of the processed payment is 202, a success.
	_, err = c.q.DB().Exec(`UPDATE idemkit_intents SET next_attempt_at = '2000-01-01T00:00:00.000Z' WHERE id = ?`, in.ID)
	require.NoError(t, err)
	got, err := c.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	require.Equal(t, 1, got[StateSucceeded], "%v", got)
}
