package chaos

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// TestHostile_ClientGoneIsNotAStoreError: a client that disconnects while
// its request waits for the store (the pool, SQLite's write lock) cancels
// the request's context, and the claim or BEGIN fails with
// context.Canceled. The chaos runs show the middleware then reports a store
// failure: outcome store_error, idemkit_server_store_errors_total
// incremented and a WARN "store error" log line, so a burst of client
// disconnects pages whoever watches the store. Nothing is wrong with the
// store; the client went away.
func TestHostile_ClientGoneIsNotAStoreError(t *testing.T) {
	t.Parallel()
	for _, mode := range []server.Mode{server.ModeLease, server.ModeTransactional} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 30*time.Second)
			db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			st, err := sqlitestore.New(db, nil)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(ctx))
			reg := prometheus.NewRegistry()
			met, err := prommetrics.New(reg)
			require.NoError(t, err)
			var (
				mu     sync.Mutex
				events []server.Event
			)
			mw, err := server.New(st, &server.Config{
				PrincipalFunc: bearerPrincipal,
				Mode:          mode,
				OnEventFunc: func(r *http.Request, e server.Event) {
					met.Observe(r, e)
					mu.Lock()
					events = append(events, e)
					mu.Unlock()
				},
			})
			require.NoError(t, err)
			ran := false
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ran = true
				w.WriteHeader(http.StatusCreated)
			}))

			gone, cancel := context.WithCancel(ctx)
			cancel() // the client hung up before the claim
			req := httptest.NewRequestWithContext(gone, http.MethodPost, "/effects", strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set(server.HeaderKey, "gone")
			h.ServeHTTP(httptest.NewRecorder(), req)

			require.False(t, ran, "the handler does not run for a client that is gone")
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, events, 1)
			e := events[0]
			require.True(t, errors.Is(e.Err, context.Canceled), "got %v", e.Err)
			require.NotEqual(t, server.OutcomeStoreError, e.Outcome, "a client that went away is not a store failure")
			require.Zero(t, counterSum(t, reg, "idemkit_server_store_errors_total"),
				"no store error is counted for a client that went away")
		})
	}
}

// counterSum sums every series of the counter family name in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
