package idemkit

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testkit"
)

// TestWithheld_ReplayForbiddenIsUnknownNotFailed: a caller's key was
// already used (by curl, another tool) for a payment the server made, and
// the account's permission to read stored payments was revoked since. The
// payments example server answers the client's request 403
// replay-forbidden: the payment happened, its answer is withheld. The
// intent must end unknown (reconcile, resend under the same key), never
// failed, which invites a retry under a new key and a second charge.
func TestWithheld_ReplayForbiddenIsUnknownNotFailed(t *testing.T) {
	t.Parallel()
	app, err := paymentsapi.Open(testkit.Ctx(t), &paymentsapi.Config{SweepInterval: -1, Logger: discardLogger(),
		DB: filepath.Join(t.TempDir(), "payments.db"), RevokedAccounts: []string{"alice"}})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(srv.Close)

	const key = "order-1234-payment"
	req, err := http.NewRequestWithContext(testkit.Ctx(t), http.MethodPost, srv.URL+"/v1/payments", bytes.NewReader([]byte(usd40)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "the first request, sent by another tool, made the payment")

	cfg := testConfig()
	cfg.Logger = discardLogger()
	cfg.SendHookFunc = aliceHook
	b := setup(t, cfg, nil)
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: srv.URL + "/v1/payments", Key: key,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(usd40)})
	require.ErrorIs(t, err, StateUnknown)
	require.Equal(t, StateUnknown, in.State, in.LastError)
	require.Equal(t, http.StatusForbidden, in.Outcome.Status)
	require.Contains(t, in.LastError, "withholds its answer")
	require.Contains(t, in.LastError, "never retry under a new key")

	payments, err := app.Payments(testkit.Ctx(t), "alice")
	require.NoError(t, err)
	require.Len(t, payments, 1, "one payment, made by the first request")
}
