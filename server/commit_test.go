package server

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
)

// When the COMMIT reached PostgreSQL but its answer was lost, the
// transaction committed: the middleware must not answer "nothing was
// applied". It re-reads the record and sends the handler's response, or
// answers outcome-unknown; a retry with the same key replays.
func TestTransactionalCommit_LostAnswerIsNotReportedAsRollback(t *testing.T) {
	t.Parallel()
	pg := newProxiedPostgres(t)
	ctx := context.Background()
	store := mwNewPostgresStore(t, ctx, pg.pool)
	_, err := pg.direct.Exec(ctx, mwEffectsTablePostgres)
	require.NoError(t, err)

	mw, err := New(store, &Config{
		PrincipalFunc: mwPrincipal,
		Mode:          ModeTransactional,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	runs := 0
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		tx, ok := PgxTx(r.Context())
		require.True(t, ok)
		sc, _ := ScopeFromContext(r.Context())
		if _, err := tx.Exec(r.Context(), mwInsertEffectPostgres, sc.Principal, sc.Key, "paid"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		pg.proxy.DropNextCommitReply()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"paid":true}`)
	})))
	t.Cleanup(srv.Close)

	post := func() *mwResponse {
		reqCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, srv.URL+"/pay", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("X-Principal", "alice")
		req.Header.Set(HeaderKey, "commit-1")
		res, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return &mwResponse{Status: res.StatusCode, Header: res.Header, Body: body}
	}

	first := post()
	require.Equal(t, 1, pg.proxy.CommitRepliesDropped(), "the proxy dropped the COMMIT's answer")
	var effects int
	require.NoError(t, pg.direct.QueryRow(ctx, mwCountEffects).Scan(&effects))
	require.Equal(t, 1, effects, "the transaction committed")
	if first.Status == http.StatusServiceUnavailable {
		first.requireProblem(t, http.StatusServiceUnavailable, ProblemOutcomeUnknown)
	} else {
		require.Equal(t, http.StatusCreated, first.Status, "body %s", first.Body)
		require.Equal(t, `{"paid":true}`, string(first.Body))
	}

	again := post()
	require.Equal(t, http.StatusCreated, again.Status, "body %s", again.Body)
	require.Equal(t, "true", again.Header.Get(HeaderReplayed))
	require.Equal(t, 1, runs)
}

// A frozen database path in transactional mode (connections up, nothing
// moving) after the handler ran: every store call has a deadline, so the
// request is answered instead of hanging, and never with a replayable
// success that was not committed.
func TestTransactional_FrozenDatabaseAnswersInBoundedTime(t *testing.T) {
	t.Parallel()
	pg := newProxiedPostgres(t)
	ctx := context.Background()
	store := mwNewPostgresStore(t, ctx, pg.pool)
	_, err := pg.direct.Exec(ctx, mwEffectsTablePostgres)
	require.NoError(t, err)
	mw, err := New(store, &Config{
		PrincipalFunc: mwPrincipal,
		Mode:          ModeTransactional,
		StoreTimeout:  300 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := PgxTx(r.Context())
		sc, _ := ScopeFromContext(r.Context())
		if _, err := tx.Exec(r.Context(), mwInsertEffectPostgres, sc.Principal, sc.Key, "paid"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		pg.proxy.Freeze()
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)

	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, srv.URL+"/pay", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("X-Principal", "alice")
	req.Header.Set(HeaderKey, "frozen-tx")
	res, err := srv.Client().Do(req)
	require.NoError(t, err, "answered before the client's 10 s timeout")
	_ = res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	pg.proxy.Thaw()
}
