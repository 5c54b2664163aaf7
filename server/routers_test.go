package server_test

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

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// routerRig is one SQLite store shared by several deployments of an API:
// a deploy that renames route parameters or moves the middleware must keep
// replaying keys still inside their window.
type routerRig struct {
	store *sqlitestore.Store
	runs  atomic.Int64
}

func newRouterRig(t *testing.T) *routerRig {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	return &routerRig{store: st}
}

func (rr *routerRig) middleware(t *testing.T) *server.Middleware {
	t.Helper()
	mw, err := server.New(rr.store, &server.Config{PrincipalFunc: func(r *http.Request) (string, error) {
		return r.Header.Get("X-Principal"), nil
	}})
	require.NoError(t, err)
	return mw
}

// charge is the protected operation: one run is one charge.
func (rr *routerRig) charge(w http.ResponseWriter, r *http.Request) {
	n := rr.runs.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"charge":`+string(rune('0'+n))+`}`)
}

type routerRes struct {
	status int
	header http.Header
	body   string
}

func send(t *testing.T, h http.Handler, path, key string) routerRes {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"amount":100}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Principal", "acct_1")
	req.Header.Set(server.HeaderKey, key)
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req.WithContext(ctx))
	return routerRes{status: w.Code, header: w.Header(), body: w.Body.String()}
}

// chi: renaming {id} to {orderID} and moving the middleware from r.Use to
// r.With between two deploys replays the key; the same key on another
// operation is a 422; an unmatched route is neither claimed nor stored.
func TestRouters_ChiRenamedRouteReplays(t *testing.T) {
	t.Parallel()
	rr := newRouterRig(t)

	before := chi.NewRouter()
	before.Use(rr.middleware(t).Wrap)
	before.Post("/v1/orders/{id}/pay", rr.charge)
	before.Post("/v1/orders/{id}/refund", rr.charge)

	after := chi.NewRouter()
	mw := rr.middleware(t)
	after.With(mw.Wrap).Post("/v1/orders/{orderID}/pay", rr.charge)
	after.With(mw.Wrap).Post("/v1/orders/{orderID}/refund", rr.charge)

	first := send(t, before, "/v1/orders/42/pay", "k-pay")
	require.Equal(t, http.StatusCreated, first.status)
	again := send(t, after, "/v1/orders/42/pay", "k-pay")
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.header.Get(wire.HeaderReplayed), "a renamed route replays")
	require.Equal(t, first.body, again.body)

	other := send(t, after, "/v1/orders/42/refund", "k-pay")
	require.Equal(t, http.StatusUnprocessableEntity, other.status, "another operation with the same key: %s", other.body)
	require.EqualValues(t, 1, rr.runs.Load(), "one charge")

	// An unmatched route under r.Use: the router's 404 is not stored, so
	// the key is still free for the real operation.
	miss := send(t, before, "/v1/orderz/42/pay", "k-miss")
	require.Equal(t, http.StatusNotFound, miss.status)
	hit := send(t, before, "/v1/orders/42/pay", "k-miss")
	require.Equal(t, http.StatusCreated, hit.status, "body %s", hit.body)
	require.Empty(t, hit.header.Get(wire.HeaderReplayed))
	require.EqualValues(t, 2, rr.runs.Load())
}

// chi with explicit operation names: keys are scoped per operation, and
// the names survive a rename of the route.
func TestRouters_ChiOperationNames(t *testing.T) {
	t.Parallel()
	rr := newRouterRig(t)
	mw := rr.middleware(t)
	// The name must be known before the middleware claims: it goes
	// outside mw.Wrap (r.With), or around the handler mw.Wrap wraps.
	before := chi.NewRouter()
	before.With(operation("orders.pay"), mw.Wrap).Post("/v1/orders/{id}/pay", rr.charge)
	before.With(operation("orders.refund"), mw.Wrap).Post("/v1/orders/{id}/refund", rr.charge)
	after := chi.NewRouter()
	after.With(mw.Wrap).Method(http.MethodPost, "/v1/orders/{orderID}/pay", server.Operation(http.HandlerFunc(rr.charge), "orders.pay"))

	require.Equal(t, http.StatusCreated, send(t, before, "/v1/orders/42/pay", "k").status)
	again := send(t, after, "/v1/orders/42/pay", "k")
	require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
	refund := send(t, before, "/v1/orders/42/refund", "k")
	require.Equal(t, http.StatusCreated, refund.status, "another named operation is independent")
	require.Empty(t, refund.header.Get(wire.HeaderReplayed))
	require.EqualValues(t, 2, rr.runs.Load())
}

// http.ServeMux: wrapping the mux or each handler, before and after a
// rename of the pattern's wildcard, is one scope; 405 and 404 from the mux
// are not stored.
func TestRouters_ServeMuxRenamedRouteReplays(t *testing.T) {
	t.Parallel()
	rr := newRouterRig(t)
	mw := rr.middleware(t)

	before := http.NewServeMux()
	before.HandleFunc("POST /v1/orders/{id}/pay", rr.charge)
	before.HandleFunc("POST /v1/orders/{id}/refund", rr.charge)
	wrappedMux := mw.Wrap(before)

	after := http.NewServeMux()
	after.Handle("POST /v1/orders/{orderID}/pay", mw.Wrap(http.HandlerFunc(rr.charge)))
	after.Handle("POST /v1/orders/{orderID}/refund", mw.Wrap(http.HandlerFunc(rr.charge)))

	require.Equal(t, http.StatusCreated, send(t, wrappedMux, "/v1/orders/7/pay", "k").status)
	again := send(t, after, "/v1/orders/7/pay", "k")
	require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
	require.Equal(t, http.StatusUnprocessableEntity, send(t, after, "/v1/orders/7/refund", "k").status)

	require.Equal(t, http.StatusNotFound, send(t, wrappedMux, "/nowhere", "k2").status)
	miss := send(t, wrappedMux, "/v1/orders/7/pay", "")
	require.Equal(t, http.StatusBadRequest, miss.status, "a matched route needs a key")
	// An unmatched route is never claimed: no key needed, no record.
	require.Equal(t, http.StatusNotFound, send(t, wrappedMux, "/nowhere", "").status)
	stats, err := rr.store.Stats(context.Background(), time.Now())
	require.NoError(t, err)
	require.EqualValues(t, 1, stats.Rows, "only the one charge is stored")
	require.Equal(t, http.StatusCreated, send(t, wrappedMux, "/v1/orders/7/pay", "k2").status, "the 404 left the key free")
	require.EqualValues(t, 2, rr.runs.Load())
}

// Records written under the old endpoint scope (METHOD pattern) keep
// replaying after the upgrade while Config.LegacyEndpointFunc names it.
func TestRouters_LegacyEndpointRecordsReplayAfterUpgrade(t *testing.T) {
	t.Parallel()
	rr := newRouterRig(t)
	principal := func(r *http.Request) (string, error) { return r.Header.Get("X-Principal"), nil }
	oldMW, err := server.New(rr.store, &server.Config{PrincipalFunc: principal, EndpointFunc: legacyPatternEndpoint})
	require.NoError(t, err)
	newMW, err := server.New(rr.store, &server.Config{PrincipalFunc: principal, LegacyEndpointFunc: legacyPatternEndpoint})
	require.NoError(t, err)
	route := func(mw *server.Middleware) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /v1/orders/{id}/pay", mw.Wrap(http.HandlerFunc(rr.charge)))
		return mux
	}
	first := send(t, route(oldMW), "/v1/orders/9/pay", "k-old")
	require.Equal(t, http.StatusCreated, first.status)
	again := send(t, route(newMW), "/v1/orders/9/pay", "k-old")
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.header.Get(wire.HeaderReplayed), "the old-scope record answers")
	require.EqualValues(t, 1, rr.runs.Load())
	// New keys get the new scope.
	require.Equal(t, http.StatusCreated, send(t, route(newMW), "/v1/orders/9/pay", "k-new").status)
	require.EqualValues(t, 2, rr.runs.Load())
}

// legacyPatternEndpoint returns r.Method, a space and the route pattern that
// http.ServeMux matched (r.Pattern without its method and host parts), or
// r.URL.Path when there is no pattern: the endpoint scope of records written
// by idemkit before keys became principal-wide by default.
// (idemkit's default before keys became principal-wide), as the README
// shows it for Config.LegacyEndpointFunc.
func legacyPatternEndpoint(r *http.Request) string {
	p := r.Pattern
	if p == "" {
		return r.Method + " " + r.URL.Path
	}
	if i := strings.IndexAny(p, " \t"); i >= 0 {
		p = strings.TrimLeft(p[i:], " \t")
	}
	if i := strings.IndexByte(p, '/'); i > 0 {
		p = p[i:] // drop the host
	}
	return r.Method + " " + p
}

// operation returns a chi middleware that names the operation of the
// handlers it wraps (see server.Operation).
func operation(name string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler { return server.Operation(h, name) }
}

// The upgrade recipe with a route renamed in the same deploy: records
// written under "POST /v1/orders/{id}/pay" must still answer retries sent to
// the route now named "/v1/orders/{orderID}/pay". A LegacyEndpointFunc that
// reads r.Pattern names the new route and misses them (the report: the
// payment ran twice); server.LegacyPatternEndpoints, given the old
// patterns, finds them.
func TestRouters_LegacyRecordsReplayAfterRenameInTheSameDeploy(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		mr := newMountRig(t, kind)
		principal := func(r *http.Request) (string, error) { return r.Header.Get("X-Principal"), nil }
		oldMW, err := server.New(mr.store, &server.Config{PrincipalFunc: principal, EndpointFunc: legacyPatternEndpoint})
		require.NoError(t, err)
		newMW, err := server.New(mr.store, &server.Config{PrincipalFunc: principal,
			LegacyEndpointFunc: server.LegacyPatternEndpoints("POST /v1/orders/{id}/pay", "POST /v1/refunds")})
		require.NoError(t, err)
		oldMux := http.NewServeMux()
		oldMux.Handle("POST /v1/orders/{id}/pay", oldMW.Wrap(http.HandlerFunc(mr.charge)))
		newMux := http.NewServeMux()
		newMux.Handle("POST /v1/orders/{orderID}/pay", newMW.Wrap(http.HandlerFunc(mr.charge)))
		newMux.Handle("POST /v1/refunds", newMW.Wrap(http.HandlerFunc(mr.charge)))

		require.Equal(t, http.StatusCreated, send(t, oldMux, "/v1/orders/9/pay", "k-old").status)
		again := send(t, newMux, "/v1/orders/9/pay", "k-old")
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed), "the old-scope record answers")
		require.EqualValues(t, 1, mr.runs.Load(), "the payment ran once")
		// New keys get the new scope.
		require.Equal(t, http.StatusCreated, send(t, newMux, "/v1/orders/9/pay", "k-new").status)
		require.EqualValues(t, 2, mr.runs.Load())
	})
}
