package server_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/server"
)

// The middleware's own log lines name a request by the hashes of its key
// and principal unless Config.LogIdentifiers asks for them as they are: a
// replay (INFO), a refused replay and a released claim after a panic
// (ERROR) are logged, and none shows the raw values.
func TestLogs_KeyAndPrincipalHashedByDefault(t *testing.T) {
	t.Parallel()
	const principal, key = "acct-7f3a-secret-principal", "key-9d1e-secret-key"
	run := func(t *testing.T, logIdentifiers bool) string {
		st := mwNewStore(t, mwSQLite)
		logs := &lockedBuffer{}
		mw, err := server.New(st.store, &server.Config{
			PrincipalFunc:  mwPrincipal,
			Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			LogIdentifiers: logIdentifiers,
			AuthorizeReplayFunc: func(r *http.Request, _ server.Replay) error {
				if r.Header.Get("X-Deny") != "" {
					return errRevoked
				}
				return nil
			},
		})
		require.NoError(t, err)
		mux := http.NewServeMux()
		mux.Handle("POST /pay", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
		})))
		mux.Handle("POST /panic", mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		h := map[string]string{"X-Principal": principal, server.HeaderKey: key}
		require.Equal(t, http.StatusCreated, mwPost(t, srv, "/pay", h, "").Status)
		require.Equal(t, "true", mwPost(t, srv, "/pay", h, "").Header.Get("Idempotent-Replayed"))
		h["X-Deny"] = "1"
		require.Equal(t, http.StatusForbidden, mwPost(t, srv, "/pay", h, "").Status)
		delete(h, "X-Deny")
		h[server.HeaderKey] = key + "-2"
		require.Equal(t, http.StatusInternalServerError, mwPost(t, srv, "/panic", h, "").Status)
		return logs.String()
	}
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		out := run(t, false)
		require.Contains(t, out, "replayed the stored response")
		require.Contains(t, out, "replay refused")
		require.Contains(t, out, "handler panicked")
		require.NotContains(t, out, principal)
		require.NotContains(t, out, key)
		require.Contains(t, out, "principal="+redact.Hash(principal))
		require.Contains(t, out, "key="+redact.Hash(key))
	})
	t.Run("LogIdentifiers", func(t *testing.T) {
		t.Parallel()
		out := run(t, true)
		require.Contains(t, out, "principal="+principal)
		require.Contains(t, out, "key="+key)
	})
}
