package echoadapter_test

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

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/echoadapter"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

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
func (b *testBundle) pay(c echo.Context) error {
	n := b.runs.Add(1)
	return c.JSON(http.StatusCreated, map[string]any{"order": c.Param("id") + c.Param("orderID"), "run": n})
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

// The handler reads echo's path parameters and writes with c.JSON; the
// write goes through the middleware, so the retry replays it byte for
// byte without running the handler. A net/http handler mounted with
// echo.WrapHandler reads the parameters with r.PathValue.
func TestEcho_PathParamsAndWritesGoThroughTheMiddleware(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store server.Store) {
		b := setup(t, store)
		e := echo.New()
		e.POST("/v1/orders/:id/pay", b.pay, echoadapter.Middleware(b.mw))
		e.POST("/v1/orders/:id/ship", echo.WrapHandler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			b.runs.Add(1)
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, "shipping "+req.PathValue("id"))
		})), echoadapter.Middleware(b.mw))

		first := post(t, e, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, first.status)
		require.JSONEq(t, `{"order":"7","run":1}`, first.body)
		again := post(t, e, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, first.body, again.body)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))

		shipped := post(t, e, "/v1/orders/8/ship", "k2")
		require.Equal(t, http.StatusAccepted, shipped.status)
		require.Equal(t, "shipping 8", shipped.body)
		require.EqualValues(t, 2, b.runs.Load())
		ev := <-b.evs
		require.Equal(t, server.OutcomeExecuted, ev.Outcome)
		require.False(t, ev.ResponseNotCaptured)
	})
}

// Renaming the route's parameter between deploys replays the key; the same
// key on another operation is 422; an error the handler returns is
// answered through the middleware (a 4xx stored, a 5xx freeing the key).
func TestEcho_RenamedRouteReplaysAndAnotherOperationIs422(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store server.Store) {
		b := setup(t, store)
		before := echo.New()
		before.POST("/v1/orders/:id/pay", b.pay, echoadapter.Middleware(b.mw))
		after := echo.New()
		after.POST("/v1/orders/:orderID/pay", b.pay, echoadapter.Middleware(b.mw))
		after.POST("/v1/refunds", func(c echo.Context) error {
			n := b.runs.Add(1)
			if n%2 == 0 {
				return echo.NewHTTPError(http.StatusBadGateway, "upstream down")
			}
			return echo.NewHTTPError(http.StatusConflict+1, "refund window closed") // 410, stored
		}, echoadapter.Middleware(b.mw))

		first := post(t, before, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, first.status)
		again := post(t, after, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Equal(t, first.body, again.body)

		other := post(t, after, "/v1/refunds", "k1")
		require.Equal(t, http.StatusUnprocessableEntity, other.status, "body %s", other.body)
		require.EqualValues(t, 1, b.runs.Load())

		require.Equal(t, http.StatusBadGateway, post(t, after, "/v1/refunds", "k2").status) // run 2: 502, not stored
		gone := post(t, after, "/v1/refunds", "k2")                                         // run 3: 410, stored
		require.Equal(t, http.StatusGone, gone.status)
		replayed := post(t, after, "/v1/refunds", "k2")
		require.Equal(t, http.StatusGone, replayed.status)
		require.Equal(t, "true", replayed.header.Get(wire.HeaderReplayed))
		require.Equal(t, gone.body, replayed.body)
		require.EqualValues(t, 3, b.runs.Load())
	})
}

// An adapter that hands the handler echo's own writer (writing around the
// middleware) never produces an empty replay nor a second run: the retry
// replays the final response-not-captured problem.
func TestEcho_WritingAroundTheMiddlewareIsNeverAnEmptyReplay(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, store server.Store) {
		b := setup(t, store)
		naive := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				var err error
				b.mw.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
					c.SetRequest(r)
					err = next(c)
				})).ServeHTTP(c.Response(), c.Request())
				return err
			}
		}
		e := echo.New()
		e.POST("/v1/orders/:id/pay", b.pay, naive)
		first := post(t, e, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusCreated, first.status)
		again := post(t, e, "/v1/orders/7/pay", "k1")
		require.Equal(t, http.StatusInternalServerError, again.status, "body %q", again.body)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Contains(t, again.body, wire.ProblemType(wire.ProblemNotCaptured))
		require.EqualValues(t, 1, b.runs.Load(), "the payment ran once")
		ev := <-b.evs
		require.True(t, ev.ResponseNotCaptured)
	})
}
