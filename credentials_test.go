package idemkit

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// queueFileBytes returns the queue file and its -wal and -shm files, as
// they are on disk now.
func queueFileBytes(t *testing.T, path string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		out[p] = b
	}
	return out
}

// TestAtRest_NoSecretInQueueFiles: credential request headers (the broad
// default denylist), credential response headers and, with
// OmitOutcomeBody, the receipt itself never reach the queue file, its WAL
// or its shared memory; they are still sent and returned in memory.
func TestAtRest_NoSecretInQueueFiles(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Session-Token", "sekrit-response-token")
		w.Header().Set("Set-Cookie", "sid=sekrit-cookie")
		w.Header().Set("X-Debug", "sekrit-unlisted-header")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pi_1","client_secret":"sekrit-client-secret"}`)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig()
	cfg.OmitOutcomeBody = true
	b := setup(t, cfg, nil)
	creds := http.Header{
		"Authorization":   {"Bearer sekrit-auth"},
		"X-Api-Key":       {"sekrit-x-api-key"},
		"Api-Key":         {"sekrit-api-key"},
		"X-Auth-Token":    {"sekrit-x-auth-token"},
		"X-Session-Token": {"sekrit-session-token"},
		"Webhook-Secret":  {"sekrit-webhook-secret"},
		"Cookie":          {"session=sekrit-cookie-in"},
	}
	h := creds.Clone()
	h.Set("Content-Type", "application/json")
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: srv.URL + "/payment_intents", Header: h, Body: []byte(`{"amount":1}`)})
	require.NoError(t, err)
	mu.Lock()
	for k, v := range creds {
		require.Equal(t, v, got[k], "%s was sent", k)
	}
	mu.Unlock()
	require.Contains(t, string(in.Outcome.Body), "client_secret", "Do returns the receipt from memory")

	_, err = b.c.Submit(testkit.Ctx(t), &Request{URL: srv.URL + "/later", Header: h})
	require.NoError(t, err)
	_, err = b.c.Submit(testkit.Ctx(t), &Request{URL: srv.URL + "/later?api_key=sekrit-url-key"})
	require.ErrorIs(t, err, ErrInvalidRequest, "a credential in the URL query is refused")

	stored, err := b.c.Get(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Empty(t, stored.Outcome.Body)
	require.Empty(t, stored.Outcome.Header)
	require.Equal(t, http.StatusCreated, stored.Outcome.Status)

	files := queueFileBytes(t, b.path)
	require.Contains(t, files, b.path+"-wal")
	for p, data := range files {
		require.False(t, bytes.Contains(data, []byte("sekrit")), "%s holds a secret at byte %d", p, bytes.Index(data, []byte("sekrit")))
	}
}

// TestAtRest_QueueFilesArePrivate: the queue file and its -wal and -shm are
// created readable by their owner only.
func TestAtRest_QueueFilesArePrivate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	_, err := b.c.Submit(testkit.Ctx(t), &Request{URL: "http://127.0.0.1:1/x"})
	require.NoError(t, err)
	for _, p := range []string{b.path, b.path + "-wal", b.path + "-shm"} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), p)
	}
}

// TestAtRest_StoredHeadersAllowlist: in allowlist mode only the listed
// request headers are written; the rest are sent from memory.
func TestAtRest_StoredHeadersAllowlist(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got http.Header
	b := setup(t, &Config{StoredHeaders: []string{"Content-Type", "*-Request-Id"}, pollInterval: testConfig().pollInterval, Backoff: fastBackoff},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = r.Header.Clone()
			mu.Unlock()
		}))
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL, Header: http.Header{
		"Content-Type": {"application/json"}, "X-Request-Id": {"r1"}, "X-Signed-Thing": {"private"},
	}})
	require.NoError(t, err)
	require.Equal(t, http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"r1"}}, in.Header)
	mu.Lock()
	require.Equal(t, "private", got.Get("X-Signed-Thing"))
	mu.Unlock()
}

// TestAtRest_OutcomeHeadersAllowlist: only allowlisted response headers
// (and the replay marker) are stored with an outcome.
func TestAtRest_OutcomeHeadersAllowlist(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Location", "/charges/ch_1")
		w.Header().Set("X-Session-Token", "tok")
		w.Header().Set("X-Internal", "x")
		w.WriteHeader(http.StatusOK)
	}))
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: b.srv.URL})
	require.NoError(t, err)
	for _, k := range []string{"Content-Type", "Idempotent-Replayed", "Location"} {
		require.NotEmpty(t, in.Outcome.Header.Get(k), k)
	}
	for _, k := range []string{"X-Session-Token", "X-Internal"} {
		require.Empty(t, in.Outcome.Header.Get(k), k)
	}
}

// TestSendHook_CredentialsScopedToHost: SendHookFunc is told the intent's
// host, so a token for one API is never sent to another.
func TestSendHook_CredentialsScopedToHost(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 2)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Get("Authorization") })
	trusted, other := httptest.NewServer(handler), httptest.NewServer(handler)
	t.Cleanup(trusted.Close)
	t.Cleanup(other.Close)
	u, err := url.Parse(trusted.URL)
	require.NoError(t, err)
	cfg := testConfig()
	cfg.SendHookFunc = func(host string, r *http.Request) error {
		if host == u.Host {
			r.Header.Set("Authorization", "Bearer for-trusted")
		}
		return nil
	}
	b := setup(t, cfg, nil)
	_, err = b.c.Do(testkit.Ctx(t), &Request{URL: trusted.URL})
	require.NoError(t, err)
	require.Equal(t, "Bearer for-trusted", <-seen)
	_, err = b.c.Do(testkit.Ctx(t), &Request{URL: other.URL})
	require.NoError(t, err)
	require.Empty(t, <-seen)
}

// TestAtRest_URLCredentialsAllowedExplicitly: AllowURLCredentials accepts
// what the default refuses.
func TestAtRest_URLCredentialsAllowedExplicitly(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"api_key=x", "Token=x", "access_token=x", "client_secret=x", "key=x", "signature=x"} {
		b := setup(t, nil, nil)
		_, err := b.c.Submit(context.Background(), &Request{URL: "http://127.0.0.1:1/x?" + q})
		require.ErrorIs(t, err, ErrInvalidRequest, q)
	}
	cfg := testConfig()
	cfg.AllowURLCredentials = true
	b := setup(t, cfg, nil)
	_, err := b.c.Submit(context.Background(), &Request{URL: "http://127.0.0.1:1/x?api_key=x&page=2"})
	require.NoError(t, err)
	b2 := setup(t, nil, nil)
	_, err = b2.c.Submit(context.Background(), &Request{URL: "http://127.0.0.1:1/x?page=2&currency=eur"})
	require.NoError(t, err, "ordinary query parameters are fine")
}

// TestCredentialHeaders_NamesStoredNeverValues: the names of the
// credential headers a request had are stored with the intent (a resuming
// process learns it needs them); their values are not.
func TestCredentialHeaders_NamesStoredNeverValues(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	ctx := testkit.Ctx(t)
	in, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/pay", Header: http.Header{
		"Authorization": {"Bearer s3cret"}, "X-Api-Key": {"k3y"}, "Content-Type": {"application/json"},
	}})
	require.NoError(t, err)
	require.Equal(t, []string{"Authorization", "X-Api-Key"}, in.CredentialHeaders)
	got, err := b.reopen(t, nil).Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"Authorization", "X-Api-Key"}, got.CredentialHeaders)
	require.Empty(t, got.Header.Get("Authorization"))
	raw, err := os.ReadFile(b.path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "s3cret")

	plain, err := b.c.Submit(ctx, &Request{URL: "http://127.0.0.1:1/pay2"})
	require.NoError(t, err)
	got, err = b.c.Get(ctx, plain.ID)
	require.NoError(t, err)
	require.Nil(t, got.CredentialHeaders)
}
