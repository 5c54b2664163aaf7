package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// mountRig is one store shared by two deployments of an API that mount
// the middleware in different places.
type mountRig struct {
	store server.Store
	runs  atomic.Int64
}

func newMountRig(t *testing.T, kind string) *mountRig {
	t.Helper()
	return &mountRig{store: mwNewStore(t, kind).store}
}

func (mr *mountRig) middleware(t *testing.T) *server.Middleware {
	t.Helper()
	mw, err := server.New(mr.store, &server.Config{PrincipalFunc: func(r *http.Request) (string, error) {
		return r.Header.Get("X-Principal"), nil
	}})
	require.NoError(t, err)
	return mw
}

func (mr *mountRig) charge(w http.ResponseWriter, _ *http.Request) {
	mr.runs.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"charge":1}`))
}

// requireReplayedAcrossDeploys sends one key to before, then to after: the
// second must replay the first, and the operation must have run once.
func (mr *mountRig) requireReplayedAcrossDeploys(t *testing.T, before, after http.Handler, path string) {
	t.Helper()
	first := send(t, before, path, "k-move")
	require.Equal(t, http.StatusCreated, first.status, "body %s", first.body)
	again := send(t, after, path, "k-move")
	require.Equal(t, http.StatusCreated, again.status, "body %s", again.body)
	require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
	require.Equal(t, first.body, again.body)
	require.EqualValues(t, 1, mr.runs.Load(), "the payment ran once")
	// Another request with the key is still told apart.
	other := send(t, after, path+"/other", "k-move")
	require.Equal(t, http.StatusUnprocessableEntity, other.status, "body %s", other.body)
}

// Moving the middleware from inside http.StripPrefix to outside it between
// two deploys keeps replaying: the fingerprint covers the request target as
// the client sent it, not the path the middleware sees (the report: a paid
// retry answered 422 key-reused after such a move).
func TestMount_StripPrefixMoveReplays(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		mr := newMountRig(t, kind)
		inside := http.NewServeMux()
		inside.Handle("/api/", http.StripPrefix("/api", mr.middleware(t).Wrap(http.HandlerFunc(mr.charge))))
		outside := http.NewServeMux()
		outside.Handle("/api/", mr.middleware(t).Wrap(http.StripPrefix("/api", http.HandlerFunc(mr.charge))))
		mr.requireReplayedAcrossDeploys(t, inside, outside, "/api/payments")
	})
}

// Likewise between a middleware on a sub-router's route and one around the
// whole router, with http.ServeMux and with chi's Mount.
func TestMount_SubRouterMoveReplays(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		t.Run("ServeMux", func(t *testing.T) {
			mr := newMountRig(t, kind)
			sub := func(wrap func(http.Handler) http.Handler) http.Handler {
				inner := http.NewServeMux()
				inner.Handle("POST /payments/", wrap(http.HandlerFunc(mr.charge)))
				outer := http.NewServeMux()
				outer.Handle("/v1/", http.StripPrefix("/v1", inner))
				return outer
			}
			onRoute := sub(mr.middleware(t).Wrap)
			aroundAll := mr.middleware(t).Wrap(sub(func(h http.Handler) http.Handler { return h }))
			mr.requireReplayedAcrossDeploys(t, onRoute, aroundAll, "/v1/payments/7")
		})
		t.Run("chi", func(t *testing.T) {
			mr := newMountRig(t, kind)
			onSub := chi.NewRouter()
			onSub.Mount("/v1", func() http.Handler {
				r := chi.NewRouter()
				r.With(mr.middleware(t).Wrap).Post("/payments/{id}", mr.charge)
				r.With(mr.middleware(t).Wrap).Post("/payments/{id}/other", mr.charge)
				return r
			}())
			onRoot := chi.NewRouter()
			onRoot.Use(mr.middleware(t).Wrap)
			onRoot.Mount("/v1", func() http.Handler {
				r := chi.NewRouter()
				r.Post("/payments/{id}", mr.charge)
				r.Post("/payments/{id}/other", mr.charge)
				return r
			}())
			mr.requireReplayedAcrossDeploys(t, onSub, onRoot, "/v1/payments/7")
		})
	})
}

// Records stored with version 1 of the fingerprint (the path as the
// middleware saw it) keep matching after the upgrade to version 2: a
// completed one replays, a different request is still 422, and an
// in-progress one whose lease lapsed is taken over.
func TestFingerprint_Version1RecordsStillMatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		mr := newMountRig(t, kind)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v1 := func(path string) []byte {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100}`))
			r.Header.Set("Content-Type", "application/json")
			return server.FingerprintAtForTest(r, []byte(`{"amount":100}`), 1)
		}
		now := time.Now()
		claim := func(key string, lease time.Duration) int64 {
			res, err := mr.store.Claim(ctx, server.ClaimRequest{
				Scope:       server.Scope{Principal: "acct_1", Endpoint: "*", Key: key},
				Fingerprint: v1("/payments"), FingerprintVersion: 1,
				Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(lease),
			})
			require.NoError(t, err)
			require.True(t, res.Acquired)
			return res.Token
		}
		token := claim("k-done", time.Minute)
		require.NoError(t, mr.store.Complete(ctx, server.Scope{Principal: "acct_1", Endpoint: "*", Key: "k-done"}, token, now,
			&server.StoredResponse{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"charge":0}`)}))
		claim("k-lapsed", time.Millisecond)

		h := mr.middleware(t).Wrap(http.HandlerFunc(mr.charge))
		again := send(t, h, "/payments", "k-done")
		require.Equal(t, http.StatusCreated, again.status, "body %s", again.body)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.JSONEq(t, `{"charge":0}`, again.body)
		require.Equal(t, http.StatusUnprocessableEntity, send(t, h, "/refunds", "k-done").status)
		require.EqualValues(t, 0, mr.runs.Load())

		require.Eventually(t, func() bool {
			return send(t, h, "/payments", "k-lapsed").status == http.StatusCreated
		}, 10*time.Second, 20*time.Millisecond, "the lapsed version-1 claim is taken over")
		require.EqualValues(t, 1, mr.runs.Load())
	})
}
