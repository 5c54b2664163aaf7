package sealstore_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// What the middleware and operators ask of a store besides server.Store
// is the inner store's: per-principal usage (quotas), Stats, and whether
// a transactional claim reads first (pgstore's does).
func TestSealStore_InnerCapabilities(t *testing.T) {
	t.Parallel()
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, name)
			store := b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true, HashKey: hashKey})
			require.Equal(t, name == "Postgres", store.TxClaimAnswersReplays())
			require.Same(t, b.inner, store.Unwrap())

			m, err := server.New(store, &server.Config{
				PrincipalFunc:       func(*http.Request) (string, error) { return "alice", nil },
				MaxKeysPerPrincipal: 1,
				Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			require.NoError(t, err, "the quotas find the inner store's usage")
			h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, receiptBody)
			}))
			pay := func(key string) int {
				req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{}`))
				req.Header.Set(server.HeaderKey, key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w.Code
			}
			require.Equal(t, http.StatusCreated, pay("k-1"))
			require.Equal(t, http.StatusTooManyRequests, pay("k-2"), "one live key per principal")
			require.Equal(t, http.StatusCreated, pay("k-1"), "a held key still replays")

			st, err := store.Stats(storetest.Context(t), time.Now())
			require.NoError(t, err)
			require.Equal(t, int64(1), st.Rows)
		})
	}
}

// An inner store without usage or stats: the wrapper says so with
// errors.ErrUnsupported rather than pretending.
func TestSealStore_CapabilitiesTheInnerStoreLacks(t *testing.T) {
	t.Parallel()
	store := newUnitStore(t, nil)
	ctx := storetest.Context(t)
	_, err := store.PrincipalUsage(ctx, "alice", time.Now())
	require.True(t, errors.Is(err, errors.ErrUnsupported), "got %v", err)
	_, err = store.Stats(ctx, time.Now())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.False(t, store.TxClaimAnswersReplays())
}
