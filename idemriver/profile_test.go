package idemriver_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
)

// A host's profile picks the key header, and its "in progress" answer is
// retried with the same key: Checkout.com's dialect here (Cko-Idempotency-Key,
// a duplicate in flight answered 409).
func TestClient_ProfilePerHost(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Cko-Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if r.Header.Get("Idempotency-Key") != "" {
			w.WriteHeader(http.StatusBadRequest) // the wrong header: a bug
			return
		}
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(api.Close)
	u, err := url.Parse(api.URL)
	require.NoError(t, err)
	checkout, ok := idemriver.KnownProfile("checkout")
	require.True(t, ok)
	checkout.Retry = []idemriver.Answer{{Status: http.StatusConflict}} // no 30 s minimum wait in a test

	b := setup(t, &idemriver.Config{Profiles: map[string]idemriver.Profile{u.Host: checkout}, Backoff: fixedBackoff(10 * time.Millisecond)})
	ctx := testkit.CtxFor(t, ctxTimeout)
	in, err := b.client.Submit(ctx, &idemriver.Request{URL: api.URL + "/payments", Body: []byte(`{}`)})
	require.NoError(t, err)
	b.start(t)
	got, err := b.client.Wait(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got.Attempts)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{in.Key, in.Key}, keys, "the profile's header carries the same key on every attempt")
}
