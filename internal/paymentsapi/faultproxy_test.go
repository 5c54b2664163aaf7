package paymentsapi

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/faultproxy"
	"github.com/idemkit/idemkit/internal/wire"
)

// TestPayments_BehindFaultProxy loses the response of the first attempt
// after the server committed it, and resets the connection of the second
// before the server sees it; the third attempt with the same key gets the
// stored payment. One intent, one payment.
func TestPayments_BehindFaultProxy(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		proxy, err := faultproxy.Start(faultproxy.Config{
			Upstream: b.srv.URL,
			DecideFunc: func(info faultproxy.RequestInfo) faultproxy.Action {
				switch info.Attempt {
				case 1:
					return faultproxy.ActionDropResponse
				case 2:
					return faultproxy.ActionReset
				}
				return faultproxy.ActionSlowWrite
			},
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, proxy.Close()) })
		tr := &http.Transport{DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

		attempt := func() (*http.Response, string, error) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, proxy.URL()+"/v1/payments", strings.NewReader(usd40))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set("Idempotency-Key", "intent-1")
			resp, err := client.Do(req)
			if err != nil {
				return nil, "", err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return resp, string(body), err
		}
		_, _, err = attempt()
		require.Error(t, err, "attempt 1: the response is dropped")
		_, _, err = attempt()
		require.Error(t, err, "attempt 2: the connection is reset")
		resp, body, err := attempt()
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, "body: %s", body)
		require.Equal(t, "true", resp.Header.Get(wire.HeaderReplayed))

		ps := b.list(t, "alice")
		require.Len(t, ps, 1, "one intent, one payment")
		require.Contains(t, body, ps[0].ID)

		log := proxy.Log()
		require.Len(t, log, 3)
		require.Equal(t, http.StatusCreated, log[0].UpstreamStatus, "the server committed the dropped attempt")
		require.Zero(t, log[1].UpstreamStatus, "the reset attempt never reached the server")
		require.Equal(t, 1, proxy.Counts()[faultproxy.ActionDropResponse])
	})
}
