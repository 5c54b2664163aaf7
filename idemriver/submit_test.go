package idemriver_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
)

// The outbox: an intent submitted in a transaction that rolls back never
// exists and is never sent; one that commits with the caller's write is sent.
func TestClient_SubmitTx(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(api.Close)
	b := setup(t, &idemriver.Config{Backoff: fixedBackoff(20 * time.Millisecond)})
	ctx := testkit.CtxFor(t, ctxTimeout)
	_, err := b.pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, intent text NOT NULL)`)
	require.NoError(t, err)

	order := func(id string, commit bool) *idemriver.Intent {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		in, err := b.client.SubmitTx(ctx, tx, &idemriver.Request{URL: api.URL + "/charges", Body: []byte(`{"order":"` + id + `"}`)})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO orders (id, intent) VALUES ($1, $2)`, id, in.ID)
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit(ctx))
		}
		return in
	}
	rolledBack := order("o1", false)
	committed := order("o2", true)
	require.NotEqual(t, rolledBack.Key, committed.Key)

	b.start(t)
	got, err := b.client.Wait(ctx, committed.ID)
	require.NoError(t, err)
	require.Equal(t, idemriver.StateSucceeded, got.State)
	require.Equal(t, http.StatusCreated, got.Outcome.Status)

	_, err = b.client.Get(ctx, rolledBack.ID)
	require.ErrorIs(t, err, idemriver.ErrNotFound)
	require.EqualValues(t, 1, hits.Load(), "only the committed intent is sent")
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestClient_SubmitInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testkit.CtxFor(t, ctxTimeout)
	for name, req := range map[string]*idemriver.Request{
		"scheme":          {URL: "ftp://example.com/x"},
		"user info":       {URL: "https://user:pw@example.com/x"},
		"query secret":    {URL: "https://example.com/x?api_key=abc"},
		"method":          {Method: "PO ST", URL: "https://example.com/x"},
		"body too large":  {URL: "https://example.com/x", Body: make([]byte, 10<<20+1)},
		"key control":     {URL: "https://example.com/x", Key: "a\x01b"},
		"header value":    {URL: "https://example.com/x", Header: http.Header{"X-A": {"a\nb"}}},
		"header name":     {URL: "https://example.com/x", Header: http.Header{"X A": {"b"}}},
		"no host":         {URL: "https:///x"},
		"unparsable URL":  {URL: "http://[::1"},
		"key too long":    {URL: "https://example.com/x", Key: string(make([]byte, 300))},
		"nil-ish method":  {Method: "\x00", URL: "https://example.com/x"},
		"relative URL":    {URL: "/charges"},
		"empty URL":       {URL: ""},
		"opaque URL":      {URL: "mailto:a@b"},
		"bad escape path": {URL: "https://example.com/%zz"},
	} {
		_, err := b.client.Submit(ctx, req)
		require.ErrorIs(t, err, idemriver.ErrInvalidRequest, name)
	}
	_, err := b.client.Submit(ctx, nil)
	require.ErrorIs(t, err, idemriver.ErrInvalidRequest)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n))
	require.Zero(t, n, "nothing is written for a refused request")
}

// Credential headers are dropped at submit, their names kept; the key comes
// from the request's Key, else its Idempotency-Key header, else is minted.
func TestClient_SubmitStoredRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: "https://example.com/x", Header: http.Header{
		"Authorization": {"Bearer s3cr3t"}, "X-Stripe-Secret": {"s3cr3t"}, "Content-Type": {"application/json"},
	}})
	require.NoError(t, err)
	require.Equal(t, in.ID, in.Key, "a minted key is the intent id")
	require.Equal(t, []string{"Authorization", "X-Stripe-Secret"}, in.CredentialHeaders)
	require.Equal(t, http.Header{"Content-Type": {"application/json"}}, in.Header)
	require.Equal(t, http.MethodPost, in.Method)

	in2, err := b.client.Submit(ctx, &idemriver.Request{URL: "https://example.com/x", Header: http.Header{"Idempotency-Key": {"order-42"}}})
	require.NoError(t, err)
	require.Equal(t, "order-42", in2.Key)
	require.NotEqual(t, in2.ID, in2.Key)
	require.Empty(t, in2.Header)

	got, err := b.client.Get(ctx, in2.ID)
	require.NoError(t, err)
	require.Equal(t, idemriver.StatePending, got.State)
	require.Equal(t, "order-42", got.Key)
	require.Equal(t, in2.JobID, got.JobID)
}

// Wait returns an intent that did not succeed with its state as the error.
func TestClient_WaitStateError(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	t.Cleanup(api.Close)
	b := setup(t, nil)
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL})
	require.NoError(t, err)
	b.start(t)
	got, err := b.client.Wait(ctx, in.ID)
	require.ErrorIs(t, err, idemriver.StateFailed)
	require.Equal(t, idemriver.StateFailed, got.State)
	require.Equal(t, http.StatusBadRequest, got.Outcome.Status)
	require.NotEmpty(t, got.LastError)

	_, err = b.client.Wait(ctx, "01890000-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, idemriver.ErrNotFound)
}

func TestNewClient_Invalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for name, cfg := range map[string]*idemriver.Config{
		"lease under attempt": {LeaseDuration: time.Second, AttemptTimeout: 2 * time.Second},
		"negative workers":    {MaxWorkers: -1},
		"bad profile":         {Profiles: map[string]idemriver.Profile{"x": {KeyHeader: "bad header"}}},
	} {
		_, err := idemriver.NewClient(b.pool, cfg)
		require.ErrorIs(t, err, idemriver.ErrInvalidConfig, name)
	}
	_, err := idemriver.NewClient(nil, nil)
	require.True(t, errors.Is(err, idemriver.ErrInvalidConfig))
}

// A caller's key names one intent: submitted again with the same request it
// returns that intent, with another request ErrKeyReused, in any state.
func TestClient_SubmitCallerKeyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testkit.CtxFor(t, ctxTimeout)
	req := &idemriver.Request{URL: "https://example.com/charges", Key: "order-7", Body: []byte(`{"amount":1}`)}
	first, err := b.client.Submit(ctx, req)
	require.NoError(t, err)
	again, err := b.client.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, first.JobID, again.JobID)

	_, err = b.client.Submit(ctx, &idemriver.Request{URL: "https://example.com/charges", Key: "order-7", Body: []byte(`{"amount":2}`)})
	require.ErrorIs(t, err, idemriver.ErrKeyReused)

	_, err = b.pool.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id = $1`, first.JobID)
	require.NoError(t, err)
	ended, err := b.client.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, first.ID, ended.ID, "an ended intent keeps its key")
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n))
	require.Equal(t, 1, n)
}
