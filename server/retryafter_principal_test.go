package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// The Retry-After of a 409 in-flight is estimated from the principal's own
// recent requests: another tenant's slow requests on the same route never
// show in it (the report: a tenant's estimate for its own 1 s request went
// from 1 s to 5 s after another tenant sent slow ones).
func TestRetryAfter_IsPerPrincipal(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		s := mwNewStore(t, kind)
		mw, err := server.New(s.store, &server.Config{
			PrincipalFunc: mwPrincipal,
			LeaseDuration: time.Minute,
			Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		})
		require.NoError(t, err)
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		var releaseOnce sync.Once
		releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
		mux := http.NewServeMux()
		mux.Handle("POST /reports", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Principal") == "bob" {
				work := time.NewTimer(3 * time.Second) // bob's reports are slow
				defer work.Stop()
				<-work.C
			} else {
				started <- struct{}{}
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		})))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		t.Cleanup(releaseAll) // runs first: a failed check must not leave alice's handler blocked
		post := func(principal, key string) *http.Response {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/reports", strings.NewReader("{}"))
			require.NoError(t, err)
			req.Header.Set("X-Principal", principal)
			req.Header.Set(server.HeaderKey, key)
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return resp
		}
		require.Equal(t, http.StatusCreated, post("bob", "b1").StatusCode)

		done := make(chan *http.Response, 1)
		go func() { done <- post("alice", "a1") }()
		mwRecv(t, started)
		dup := post("alice", "a1")
		require.Equal(t, http.StatusConflict, dup.StatusCode)
		require.Equal(t, "1", dup.Header.Get("Retry-After"), "alice has no history of her own; bob's 3 s must not show")
		require.NotEmpty(t, dup.Header.Get(wire.HeaderWindow))
		releaseAll()
		require.Equal(t, http.StatusCreated, mwRecv(t, done).StatusCode)
	})
}

// A duplicate of a request on a route that usually takes milliseconds is
// told to come back in about a second, not after the whole remaining lease:
// generic clients with a 20 s timeout would otherwise give up on a payment
// that succeeded.
func TestRetryAfter_EstimatesFromRecentDurations(t *testing.T) {
	t.Parallel()
	for _, kind := range mwStoreKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := mwNewStore(t, kind)
			entered := make(chan struct{})
			release := make(chan struct{})
			rig := newLeaseRig(t, s.store, func(c *server.Config) { c.LeaseDuration = 30 * time.Second }, func(run int64, w http.ResponseWriter, r *http.Request) {
				if run == 2 {
					close(entered)
					<-release
				}
				charged(run, w)
			})
			require.Equal(t, http.StatusCreated, rig.post(t, "fast-1").Status)

			done := make(chan *mwResponse, 1)
			go func() { done <- rig.post(t, "slow-1") }()
			<-entered
			dup := rig.post(t, "slow-1")
			dup.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
			require.Equal(t, "1", dup.Header.Get("Retry-After"), "the route takes milliseconds; the lease has 30 s left")
			close(release)
			require.Equal(t, http.StatusCreated, (<-done).Status)
		})
	}
}
