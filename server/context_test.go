package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestContext_Accessors(t *testing.T) {
	t.Parallel()
	_, ok := ScopeFromContext(context.Background())
	require.False(t, ok)
	_, ok = PgxTx(context.Background())
	require.False(t, ok)
	_, ok = SQLTx(context.Background())
	require.False(t, ok)

	forEachStoreAndMode(t, func(t *testing.T, kind string, mode Mode) {
		b := mwSetup(t, kind, mode, nil)
		mux := http.NewServeMux()
		mux.Handle("POST /whoami", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sc, okScope := ScopeFromContext(r.Context())
			_, okPgx := PgxTx(r.Context())
			_, okSQL := SQLTx(r.Context())
			fmt.Fprintf(w, "%s|%s|%s|%v|%v|%v", sc.Principal, sc.Endpoint, sc.Key, okScope, okPgx, okSQL)
		})))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		b.srv = srv
		res := b.do(t, mwReq{path: "/whoami", principal: "alice", keys: []string{`"k-1"`}, body: "x"})
		require.Equal(t, http.StatusOK, res.Status)
		want := fmt.Sprintf("alice|POST /whoami|k-1|true|%v|%v",
			mode == ModeTransactional && kind == mwPostgres, mode == ModeTransactional && kind == mwSQLite)
		require.Equal(t, want, string(res.Body))
	})
}
