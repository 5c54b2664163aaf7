package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

func TestContext_Accessors(t *testing.T) {
	t.Parallel()
	_, ok := server.ScopeFromContext(context.Background())
	require.False(t, ok)
	_, ok = pgstore.Tx(context.Background())
	require.False(t, ok)
	_, ok = sqlitestore.Tx(context.Background())
	require.False(t, ok)

	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		mux := http.NewServeMux()
		mux.Handle("POST /whoami", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sc, okScope := server.ScopeFromContext(r.Context())
			_, okPgx := pgstore.Tx(r.Context())
			_, okSQL := sqlitestore.Tx(r.Context())
			fmt.Fprintf(w, "%s|%s|%s|%v|%v|%v", sc.Principal, sc.Endpoint, sc.Key, okScope, okPgx, okSQL)
		})))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		b.srv = srv
		res := b.do(t, mwReq{path: "/whoami", principal: "alice", keys: []string{`"k-1"`}, body: "x"})
		require.Equal(t, http.StatusOK, res.Status)
		want := fmt.Sprintf("alice|*|k-1|true|%v|%v",
			mode == server.ModeTransactional && kind == mwPostgres, mode == server.ModeTransactional && kind != mwPostgres) // MySQL's is a *sql.Tx too
		require.Equal(t, want, string(res.Body))
	})
}

func TestScope_DownstreamKey(t *testing.T) {
	t.Parallel()
	base := server.Scope{Principal: "alice", Endpoint: "POST /payments", Key: "k1"}
	k := base.DownstreamKey()
	require.Equal(t, k, base.DownstreamKey(), "stable across calls (retries, takeovers)")
	require.Len(t, k, 36)
	require.True(t, strings.HasPrefix(k, "idk_"), "got %q", k)
	for _, other := range []server.Scope{
		{Principal: "bob", Endpoint: base.Endpoint, Key: base.Key},
		{Principal: base.Principal, Endpoint: "POST /refunds", Key: base.Key},
		{Principal: base.Principal, Endpoint: base.Endpoint, Key: "k2"},
		// Length-prefixed parts: moving bytes between fields changes the key.
		{Principal: "alic", Endpoint: "e" + base.Endpoint, Key: base.Key},
	} {
		require.NotEqual(t, k, other.DownstreamKey(), "scope %+v", other)
	}
}
