package fakeprovider_test

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fakeprovider"
	"github.com/idemkit/idemkit/internal/testkit"
)

// client is the idemkit client speaking profile, with short backoffs.
func client(t *testing.T, profile string) *idemkit.Client {
	t.Helper()
	p, ok := idemkit.KnownProfile(profile)
	require.True(t, ok)
	c, err := idemkit.Open(testkit.Ctx(t), filepath.Join(t.TempDir(), "queue.db"), &idemkit.Config{
		Profile: &p,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backoff: func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return 10 * time.Millisecond },
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer alice")
			return nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func pay(t *testing.T, c *idemkit.Client, url string) *idemkit.Intent {
	t.Helper()
	in, err := c.Do(testkit.Ctx(t), &idemkit.Request{Method: http.MethodPost, URL: url + "/v1/charges",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"amount": 4000, "currency": "usd"}`)})
	require.NoError(t, err)
	return in
}

// The answer to a payment is lost after the provider made it: the client
// retries with the same key and gets the stored answer; one execution.
func TestServer_DropAnswers(t *testing.T) {
	t.Parallel()
	for _, profile := range []string{"stripe", "adyen", "checkout", "paypal", "ietf", "idemkit"} {
		t.Run(profile, func(t *testing.T) {
			t.Parallel()
			fake := fakeprovider.Start(t, profile, nil)
			fake.DropAnswers(1)
			in := pay(t, client(t, profile), fake.URL)
			require.Equal(t, idemkit.StateSucceeded, in.State)
			require.Equal(t, 2, in.Attempts)
			require.Equal(t, 1, fake.Executions())
			// Stripe and idemkit mark the replay; the others send the same
			// answer unmarked.
			require.Equal(t, profile == "stripe" || profile == "idemkit", in.Outcome.Replayed)
		})
	}
}

// FailNext answers with an error and runs nothing: the client retries.
func TestServer_FailNext(t *testing.T) {
	t.Parallel()
	fake := fakeprovider.Start(t, "stripe", nil)
	fake.FailNext(2, http.StatusServiceUnavailable)
	in := pay(t, client(t, "stripe"), fake.URL)
	require.Equal(t, idemkit.StateSucceeded, in.State)
	require.Equal(t, 3, in.Attempts)
	require.Equal(t, 1, fake.Executions())
	require.Equal(t, 3, fake.Requests())
}

// While an execution is held in flight, a duplicate gets the dialect's
// in-progress answer.
func TestServer_HoldNext(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		profile    string
		status     int
		code       string
		retryAfter string
	}{
		{"stripe", http.StatusConflict, "idempotency_key_in_use", ""},
		{"checkout", http.StatusConflict, "request_in_progress", ""},
		{"paypal", http.StatusConflict, "RESOURCE_CONFLICT", ""},
		{"ietf", http.StatusConflict, "in-flight", "1"},
		{"idemkit", http.StatusConflict, "in-flight", "1"},
	} {
		t.Run(tt.profile, func(t *testing.T) {
			t.Parallel()
			fake := fakeprovider.Start(t, tt.profile, nil)
			fake.HoldNext(1, 500*time.Millisecond)
			key := "order-17"
			if tt.profile == "ietf" {
				key = `"order-17"`
			}
			send := func() *http.Response {
				req, err := http.NewRequest(http.MethodPost, fake.URL+"/v1/charges", strings.NewReader(`{"amount": 1}`))
				require.NoError(t, err)
				req.Header.Set(fake.KeyHeader(), key)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				return resp
			}
			var wg sync.WaitGroup
			var first *http.Response
			wg.Go(func() { first = send() })
			require.Eventually(t, func() bool { return fake.Executions() == 1 }, 5*time.Second, 5*time.Millisecond)
			dup := send()
			body, _ := io.ReadAll(dup.Body)
			dup.Body.Close()
			require.Equal(t, tt.status, dup.StatusCode, string(body))
			require.Contains(t, string(body), tt.code)
			require.Equal(t, tt.retryAfter, dup.Header.Get("Retry-After"))
			wg.Wait()
			first.Body.Close()
			require.Less(t, first.StatusCode, 300)
			require.Equal(t, 1, fake.Executions())
		})
	}
}

func TestNew_UnknownProfile(t *testing.T) {
	t.Parallel()
	_, err := fakeprovider.New("acme", nil)
	require.ErrorContains(t, err, `unknown profile "acme"`)
}
