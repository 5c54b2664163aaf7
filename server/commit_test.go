package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

// txProxyRig is a transactional-mode middleware on PostgreSQL reached
// through a tcpfault.Proxy. Its handler writes one effect on the request's
// transaction, then calls afterEffect (which breaks the database path) and
// answers 201.
type txProxyRig struct {
	pg   *proxiedPostgres
	srv  *httptest.Server
	runs int
}

func newTxProxyRig(t *testing.T, storeTimeout time.Duration, afterEffect func(*proxiedPostgres)) *txProxyRig {
	t.Helper()
	ctx := context.Background()
	rig := &txProxyRig{pg: newProxiedPostgres(t)}
	store := mwNewPostgresStore(t, ctx, rig.pg.pool)
	_, err := rig.pg.direct.Exec(ctx, mwEffectsTablePostgres)
	require.NoError(t, err)
	mw, err := server.New(store, &server.Config{
		PrincipalFunc: mwPrincipal,
		Mode:          server.ModeTransactional,
		StoreTimeout:  storeTimeout,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	rig.srv = httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.runs++
		tx, _ := pgstore.Tx(r.Context())
		sc, _ := server.ScopeFromContext(r.Context())
		if _, err := tx.Exec(r.Context(), mwInsertEffectPostgres, sc.Principal, sc.Key, "paid"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		afterEffect(rig.pg)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"paid":true}`)
	})))
	t.Cleanup(rig.srv.Close)
	return rig
}

func (rig *txProxyRig) post(t *testing.T, key string) *mwResponse {
	t.Helper()
	return mwPost(t, rig.srv, "/pay", map[string]string{"X-Principal": "alice", server.HeaderKey: key}, `{}`)
}

// mwPost sends a POST with the given headers and body to srv and reads the
// response in full, failing the test if it is not answered within 15 s.
func mwPost(t *testing.T, srv *httptest.Server, path string, header map[string]string, body string) *mwResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := srv.Client().Do(req)
	require.NoError(t, err, "the request must be answered, not hang")
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return &mwResponse{Status: res.StatusCode, Header: res.Header, Body: b}
}

// When the COMMIT reached PostgreSQL but its answer was lost, the
// transaction committed: the middleware must not answer "nothing was
// applied". It re-reads the record and sends the handler's response, or
// answers outcome-unknown; a retry with the same key replays.
func TestTransactionalCommit_LostAnswerIsNotReportedAsRollback(t *testing.T) {
	t.Parallel()
	rig := newTxProxyRig(t, 5*time.Second, func(pg *proxiedPostgres) { pg.proxy.DropReply(tcpfault.PostgresCommitComplete) })

	first := rig.post(t, "commit-1")
	require.Equal(t, 1, rig.pg.proxy.Dropped(), "the proxy dropped the COMMIT's answer")
	var effects int
	require.NoError(t, rig.pg.direct.QueryRow(context.Background(), mwCountEffects).Scan(&effects))
	require.Equal(t, 1, effects, "the transaction committed")
	if first.Status == http.StatusServiceUnavailable {
		first.requireProblem(t, http.StatusServiceUnavailable, wire.ProblemOutcomeUnknown)
	} else {
		require.Equal(t, http.StatusCreated, first.Status, "body %s", first.Body)
		require.Equal(t, `{"paid":true}`, string(first.Body))
	}

	again := rig.post(t, "commit-1")
	require.Equal(t, http.StatusCreated, again.Status, "body %s", again.Body)
	require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
	require.Equal(t, 1, rig.runs)
}

// A frozen database path in transactional mode (connections up, nothing
// moving) after the handler ran: every store call has a deadline, so the
// request is answered instead of hanging, and never with a replayable
// success that was not committed.
func TestTransactional_FrozenDatabaseAnswersInBoundedTime(t *testing.T) {
	t.Parallel()
	rig := newTxProxyRig(t, 300*time.Millisecond, func(pg *proxiedPostgres) { pg.proxy.Freeze() })
	res := rig.post(t, "frozen-tx")
	require.Equal(t, http.StatusServiceUnavailable, res.Status, "body %s", res.Body)
	rig.pg.proxy.Thaw()
}
