package ginadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/ginadapter"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

func init() { gin.SetMode(gin.TestMode) }

// forEachStore runs f against a fresh SQLite file and a fresh PostgreSQL
// schema.
func forEachStore(t *testing.T, f func(t *testing.T, store server.Store)) {
	t.Helper()
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		st, err := sqlitestore.New(db, nil)
		require.NoError(t, err)
		require.NoError(t, st.Migrate(ctx))
		f(t, st)
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		st, err := pgstore.New(testpg.Pool(t), nil)
		require.NoError(t, err)
		require.NoError(t, st.Migrate(context.Background()))
		f(t, st)
	})
}

type testBundle struct {
	mw   *server.Middleware
	runs atomic.Int64
	evs  chan server.Event
}

func setup(t *testing.T, store server.Store) *testBundle {
	t.Helper()
	b := &testBundle{evs: make(chan server.Event, 64)}
	mw, err := server.New(store, &server.Config{
		PrincipalFunc: func(r *http.Request) (string, error) { return r.Header.Get("X-Principal"), nil },
		OnEventFunc:   func(_ *http.Request, e server.Event) { b.evs <- e },
	})
	require.NoError(t, err)
	b.mw = mw
	return b
}

// pay answers 201 with the order id read from the path.
func (b *testBundle) pay(c *gin.Context) {
	n := b.runs.Add(1)
	c.JSON(http.StatusCreated, gin.H{"order": c.Param("id") + c.Param("orderID"), "run": n})
}

type response struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, h http.Handler, path, key string) response {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(`{"amount":100}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Principal", "acct_1")
	req.Header.Set(server.HeaderKey, key)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

// The handler reads gin's path parameters and writes with c.JSON; the
// write goes through the middleware, so the retry replays it byte for
// byte without running the handler. A net/http handler mounted with
// gin.WrapH reads the parameters with r.PathValue.
func TestGin_PathParamsAndWritesGoThroughTheMiddleware(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store server.Store) {
		b := setup(t, store)
		r := gin.New()
		r.POST("/v1/orders/:id/pay", ginadapter.Middleware(b.mw), b.pay)
		r.POST("/v1/orders/:id/ship", ginadapter.Middleware(b.mw), gin.WrapH(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			b.runs.Add(1)
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, "shipping "+req.PathValue("id"))
		})))

		first := post(t, r, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, first.status)
		require.JSONEq(t, `{"order":"7","run":1}`, first.body)
		again := post(t, r, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))

		shipped := post(t, r, "/v1/orders/8/ship", "k2")
		require.Equal(t, http.StatusAccepted, shipped.status)
		require.Equal(t, "shipping 8", shipped.body)
		require.EqualValues(t, 2, b.runs.Load())
		ev := <-b.evs
		require.Equal(t, server.OutcomeExecuted, ev.Outcome)
		require.False(t, ev.ResponseNotCaptured)
	})
}

// Renaming the route's parameter between deploys replays the key; the same
// key on another operation is 422; a status set with c.Status alone is
// stored too.
func TestGin_RenamedRouteReplaysAndAnotherOperationIs422(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store server.Store) {
		b := setup(t, store)
		before := gin.New()
		before.POST("/v1/orders/:id/pay", ginadapter.Middleware(b.mw), b.pay)
		after := gin.New()
		after.POST("/v1/orders/:orderID/pay", ginadapter.Middleware(b.mw), b.pay)
		after.POST("/v1/refunds", ginadapter.Middleware(b.mw), func(c *gin.Context) {
			b.runs.Add(1)
			c.Status(http.StatusNoContent)
		})

		first := post(t, before, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, first.status)
		again := post(t, after, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Equal(t, first.body, again.body)

		other := post(t, after, "/v1/refunds", "k1")
		require.Equal(t, http.StatusUnprocessableEntity, other.status, "body %s", other.body)
		require.Contains(t, other.body, wire.ProblemType(wire.ProblemKeyReused))
		require.EqualValues(t, 1, b.runs.Load())

		require.Equal(t, http.StatusNoContent, post(t, after, "/v1/refunds", "k2").status)
		replayed := post(t, after, "/v1/refunds", "k2")
		require.Equal(t, http.StatusNoContent, replayed.status)
		require.Equal(t, "true", replayed.header.Get(wire.HeaderReplayed))
		require.EqualValues(t, 2, b.runs.Load())
	})
}

// The adapter a gin user writes first, calling c.Next inside mw.Wrap: the
// handlers write to gin's own writer, around the middleware. The first
// call gets the handler's 201; the retry is never an empty 200 (the
// report) and never runs the handler again: it replays the final
// response-not-captured problem, and the event says so.
func TestGin_NaiveAdapterIsNeverAnEmptyReplay(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store server.Store) {
		b := setup(t, store)
		naive := func(c *gin.Context) {
			b.mw.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				c.Request = r
				c.Next()
			})).ServeHTTP(c.Writer, c.Request)
			c.Abort()
		}
		r := gin.New()
		r.POST("/v1/orders/:id/pay", naive, b.pay)

		first := post(t, r, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, first.status)
		require.JSONEq(t, `{"order":"7","run":1}`, first.body)
		again := post(t, r, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusInternalServerError, again.status, "body %q", again.body)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Contains(t, again.body, wire.ProblemType(wire.ProblemNotCaptured))
		require.EqualValues(t, 1, b.runs.Load(), "the payment ran once")
		ev := <-b.evs
		require.True(t, ev.ResponseNotCaptured)
		require.Error(t, ev.Err)
	})
}
