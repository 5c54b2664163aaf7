package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// payOnce POSTs one payment and reads the answer.
func payOnce(ctx context.Context, addr, account, key string) (int, http.Header, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/payments", strings.NewReader(usd40))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+account)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body), err
}

// With --wait, two identical payments sent at once are one payment: the one
// that claims the key runs (held by --delay), the other waits for it, as
// idemkit_server_waiting shows, and gets its response instead of a 409.
func TestRun_WaitAnswersTheDuplicateWithTheOriginal(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t, "--wait", "60s", "--delay", "2s", "--metrics")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	type answer struct {
		status   int
		replayed string
		body     string
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			status, h, body, err := payOnce(ctx, addr, "alice", "key-wait")
			if err != nil {
				t.Errorf("pay: %v", err)
			}
			answers <- answer{status, h.Get("Idempotent-Replayed"), body}
		}()
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "idemkit_server_waiting{store=\"sqlite\"} 1")
	}, 30*time.Second, 5*time.Millisecond, "one of the two waits for the other")

	a, b := <-answers, <-answers
	require.Equal(t, http.StatusCreated, a.status, a.body)
	require.Equal(t, http.StatusCreated, b.status, "the duplicate waited instead of a 409: %s", b.body)
	require.Equal(t, a.body, b.body, "the same payment")
	require.ElementsMatch(t, []string{"", "true"}, []string{a.replayed, b.replayed})
}

func TestParseFlags_WaitAndRevokedAccounts(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--wait", "5s", "--revoked-accounts", "mallory, eve"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, o.cfg.WaitInFlight)
	require.Equal(t, []string{"mallory", "eve"}, o.cfg.RevokedAccounts)
	_, err = parseFlags([]string{"--wait", "-1s"}, io.Discard)
	require.ErrorContains(t, err, "--wait")
}
