package main

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/redact"
)

// The example's request log shows neither the Idempotency-Key nor the
// account (the bearer token, in this demo) unless --log-identifiers asks for
// them: both are hashed, the form idemkit store inflight prints.
func TestLogs_KeyAndAccountHashedUnlessAsked(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	const account, key = "acct_secret_token", "key-private-123"

	p := startBinary(t, bin, "--db", filepath.Join(t.TempDir(), "payments.db"), "--addr", "127.0.0.1:0")
	resp, body := p.pay(t, account, key, usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	p.stop(t)
	logs := p.stderr.String()
	require.Contains(t, logs, "outcome=executed")
	require.NotContains(t, logs, key)
	require.NotContains(t, logs, account)
	require.Contains(t, logs, "key="+redact.Hash(key))
	require.Contains(t, logs, "principal="+redact.Hash(account))

	p = startBinary(t, bin, "--db", filepath.Join(t.TempDir(), "payments.db"), "--addr", "127.0.0.1:0", "--log-identifiers")
	resp, body = p.pay(t, account, key, usd40)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	p.stop(t)
	require.Contains(t, p.stderr.String(), "key="+key)
	require.Contains(t, p.stderr.String(), "principal="+account)
}
