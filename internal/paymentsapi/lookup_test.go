package paymentsapi

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// lookupKey sends GET /v1/idempotency-keys/{key} as account.
func (b *testBundle) lookupKey(t *testing.T, account, key string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.srv.URL+"/v1/idempotency-keys/"+key, nil)
	require.NoError(t, err)
	if account != "" {
		req.Header.Set("Authorization", "Bearer "+account)
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// TestPayments_KeyLookup: the API mounts the key status lookup; the
// account that paid gets its receipt back, another account gets exactly
// the answer of a key never used, and no account is a 401.
func TestPayments_KeyLookup(t *testing.T) {
	t.Parallel()
	forEachBackendAndMode(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		status, before := b.lookupKey(t, "bob", "intent-1")
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, `{"key":"intent-1","status":"unknown"}`, string(before))

		paid := b.pay(t, "alice", "intent-1", usd40)
		require.Equal(t, http.StatusCreated, paid.status, "%s", paid.body)

		status, body := b.lookupKey(t, "alice", "intent-1")
		require.Equal(t, http.StatusOK, status, "%s", body)
		var a struct {
			Status         string `json:"status"`
			ResponseStatus int    `json:"response_status"`
			Response       struct {
				Status     int    `json:"status"`
				BodyBase64 string `json:"body_base64"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal(body, &a))
		require.Equal(t, "completed", a.Status)
		require.Equal(t, http.StatusCreated, a.ResponseStatus)
		receipt, err := base64.StdEncoding.DecodeString(a.Response.BodyBase64)
		require.NoError(t, err)
		require.JSONEq(t, string(paid.body), string(receipt), "the receipt the payment answered")

		status, after := b.lookupKey(t, "bob", "intent-1")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, before, after, "another account's key reads as never used")

		status, _ = b.lookupKey(t, "", "intent-1")
		require.Equal(t, http.StatusUnauthorized, status)
	})
}
