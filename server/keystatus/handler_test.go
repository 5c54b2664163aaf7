package keystatus_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/keystatus"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/storetest"
)

const receipt = `{"id":"pay_1","amount":4000}`

func storedReceipt() *server.StoredResponse {
	return &server.StoredResponse{Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		Body:   []byte(receipt)}
}

// TestHandler_AnswersEachState: in progress with its age, completed with
// the stored status only, and unknown, as the wire format says.
func TestHandler_AnswersEachState(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st server.Store) {
		now := time.Now()
		cfg := &keystatus.Config{Window: time.Hour}
		cfg.SetClock(func() time.Time { return now.Add(90 * time.Second) })
		h := newHandler(t, st, cfg)
		claim(t, st, server.Scope{Principal: "alice", Endpoint: "*", Key: "running"}, now)
		complete(t, st, server.Scope{Principal: "alice", Endpoint: "*", Key: "done"}, now, storedReceipt())

		w := lookup(t, h, "alice", "/v1/idempotency-keys/running")
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Equal(t, "application/json", w.Header().Get("Content-Type"))
		require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
		require.Equal(t, "3600", w.Header().Get(wire.HeaderWindow))
		var a map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		require.Equal(t, "running", a["key"])
		require.Equal(t, "in_progress", a["status"])
		require.Equal(t, "*", a["endpoint"])
		require.InDelta(t, 90, a["age_seconds"], 2, "age by the handler's clock (the store's clock may differ a little)")
		require.NotContains(t, a, "response")

		w = lookup(t, h, "alice", "/v1/idempotency-keys/done")
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		a = nil
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		require.Equal(t, "completed", a["status"])
		require.EqualValues(t, 201, a["response_status"])
		require.Equal(t, "*", a["endpoint"])
		require.NotContains(t, a, "response", "by default only the status is shown")
		require.NotContains(t, w.Body.String(), "pay_1")
		ts, err := time.Parse(time.RFC3339, a["created_at"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, now, ts, 5*time.Second)

		w = lookup(t, h, "alice", "/v1/idempotency-keys/never")
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, `{"key":"never","status":"unknown"}`+"\n", w.Body.String())
		require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	})
}

// TestHandler_ShowsResponseOnlyIfAllowed: ShowResponseFunc decides, per
// record; the stored response comes back whole (opened, on a sealed
// store).
func TestHandler_ShowsResponseOnlyIfAllowed(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st server.Store) {
		var asked []server.Scope
		h := newHandler(t, st, &keystatus.Config{ShowResponseFunc: func(r *http.Request, s server.Scope, resp *server.StoredResponse) bool {
			asked = append(asked, s)
			return s.Key == "shown" && resp.Status == http.StatusCreated
		}})
		now := time.Now()
		complete(t, st, server.Scope{Principal: "alice", Endpoint: "*", Key: "shown"}, now, storedReceipt())
		complete(t, st, server.Scope{Principal: "alice", Endpoint: "*", Key: "hidden"}, now, storedReceipt())

		w := lookup(t, h, "alice", "/v1/idempotency-keys/shown")
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var a keystatus.Answer
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		require.Equal(t, keystatus.StatusCompleted, a.Status)
		require.NotNil(t, a.Response)
		require.Equal(t, http.StatusCreated, a.Response.Status)
		require.Equal(t, "/v1/payments/pay_1", a.Response.Headers.Get("Location"))
		body, err := base64.StdEncoding.DecodeString(a.Response.BodyBase64)
		require.NoError(t, err)
		require.Equal(t, receipt, string(body))

		w = lookup(t, h, "alice", "/v1/idempotency-keys/hidden")
		require.Equal(t, http.StatusOK, w.Code)
		a = keystatus.Answer{}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &a))
		require.Equal(t, keystatus.StatusCompleted, a.Status)
		require.Equal(t, http.StatusCreated, a.ResponseStatus)
		require.Nil(t, a.Response)
		require.NotContains(t, w.Body.String(), base64.StdEncoding.EncodeToString([]byte(receipt)))
		require.NotContains(t, w.Body.String(), "Location")

		require.Len(t, asked, 2, "asked once per completed record of the caller")
		for _, s := range asked {
			require.Equal(t, "alice", s.Principal)
		}
	})
}

// TestHandler_OtherPrincipalIsNeverUsedKey: bob's record of a key, in
// progress or completed, is answered to alice byte for byte as the key
// was answered before anyone used it, through the same store calls (the
// same number, the same methods, under alice's principal only).
func TestHandler_OtherPrincipalIsNeverUsedKey(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st server.Store) {
		cs := &countingStore{Store: st}
		ops := []string{"*", "payments.create"}
		h := newHandler(t, cs, &keystatus.Config{Operations: ops,
			ShowResponseFunc: func(*http.Request, server.Scope, *server.StoredResponse) bool { return true }})
		now := time.Now()

		type seen struct {
			status int
			header http.Header
			body   string
			calls  []call
		}
		ask := func(principal, key string) seen {
			t.Helper()
			cs.take()
			w := lookup(t, h, principal, "/v1/idempotency-keys/"+key)
			return seen{w.Code, w.Header(), w.Body.String(), cs.take()}
		}
		wantCalls := []call{{"Get", "alice", "*"}, {"Get", "alice", "payments.create"}}

		before := map[string]seen{}
		for _, k := range []string{"k-done", "k-running", "k-op"} {
			before[k] = ask("alice", k)
			require.Equal(t, http.StatusOK, before[k].status)
			require.Equal(t, fmt.Sprintf(`{"key":%q,"status":"unknown"}`+"\n", k), before[k].body)
			require.Equal(t, wantCalls, before[k].calls)
		}

		complete(t, st, server.Scope{Principal: "bob", Endpoint: "*", Key: "k-done"}, now, storedReceipt())
		claim(t, st, server.Scope{Principal: "bob", Endpoint: "*", Key: "k-running"}, now)
		complete(t, st, server.Scope{Principal: "bob", Endpoint: "payments.create", Key: "k-op"}, now, storedReceipt())

		for k, b := range before {
			got := ask("alice", k)
			require.Equal(t, b, got, "alice asking about bob's %s", k)
			// bob sees his own record, by the same calls under his principal.
			own := ask("bob", k)
			require.Equal(t, http.StatusOK, own.status)
			require.NotContains(t, own.body, `"unknown"`, k)
			require.Equal(t, []call{{"Get", "bob", "*"}, {"Get", "bob", "payments.create"}}, own.calls)
		}

		// Naming the operation: one Get, whatever the answer.
		cs.take()
		w := lookup(t, h, "alice", "/v1/idempotency-keys/k-op?endpoint=payments.create")
		require.Equal(t, `{"key":"k-op","status":"unknown"}`+"\n", w.Body.String())
		require.Equal(t, []call{{"Get", "alice", "payments.create"}}, cs.take())
		w = lookup(t, h, "bob", "/v1/idempotency-keys/k-op?endpoint=payments.create")
		require.Contains(t, w.Body.String(), `"status":"completed"`)
		require.Equal(t, []call{{"Get", "bob", "payments.create"}}, cs.take())
	})
}

// TestHandler_RefusesAsTheMiddlewareDoes: no principal is the
// middleware's 401 problem, byte for byte; a key the middleware would
// refuse is its 400 key-invalid problem.
func TestHandler_RefusesAsTheMiddlewareDoes(t *testing.T) {
	t.Parallel()
	st := newStore(t, "SQLite")
	cs := &countingStore{Store: st}
	h := newHandler(t, cs, nil)
	mw, err := server.New(st, &server.Config{PrincipalFunc: bearer})
	require.NoError(t, err)
	protected := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	post := func(key string, auth bool) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(storetest.Context(t), http.MethodPost, "/v1/payments", strings.NewReader("{}"))
		r.Header.Set("Idempotency-Key", key)
		if auth {
			r.Header.Set("Authorization", "Bearer alice")
		}
		w := httptest.NewRecorder()
		protected.ServeHTTP(w, r)
		return w
	}

	mwAnswer := post("k1", false)
	require.Equal(t, http.StatusUnauthorized, mwAnswer.Code)
	w := lookup(t, h, "", "/v1/idempotency-keys/k1")
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, mwAnswer.Body.String(), w.Body.String())
	require.Equal(t, mwAnswer.Header().Get("Content-Type"), w.Header().Get("Content-Type"))

	long := strings.Repeat("k", wire.MaxKeyBytes+1)
	mwAnswer = post(long, true)
	require.Equal(t, http.StatusBadRequest, mwAnswer.Code)
	w = lookup(t, h, "alice", "/v1/idempotency-keys/"+long)
	require.Equal(t, http.StatusBadRequest, w.Code)
	requireProblemType(t, mwAnswer.Body.Bytes(), wire.ProblemKeyInvalid)
	requireProblemType(t, w.Body.Bytes(), wire.ProblemKeyInvalid)

	w = lookup(t, h, "alice", "/v1/idempotency-keys/a%01b")
	require.Equal(t, http.StatusBadRequest, w.Code)
	requireProblemType(t, w.Body.Bytes(), wire.ProblemKeyInvalid)

	w = lookup(t, h, "alice", "/v1/idempotency-keys/k1?endpoint=refunds.create")
	require.Equal(t, http.StatusBadRequest, w.Code)
	requireProblemType(t, w.Body.Bytes(), wire.ProblemEndpointInvalid)
	require.Empty(t, cs.take(), "a refused lookup reads nothing")
}

// TestHandler_KeyWithSlash: a key holding '/' travels escaped and is
// looked up whole.
func TestHandler_KeyWithSlash(t *testing.T) {
	t.Parallel()
	st := newStore(t, "SQLite")
	h := newHandler(t, st, nil)
	complete(t, st, server.Scope{Principal: "alice", Endpoint: "*", Key: "order/42 ü"}, time.Now(), storedReceipt())
	w := lookup(t, h, "alice", "/v1/idempotency-keys/order%2F42%20%C3%BC")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `"status":"completed"`)
	require.Contains(t, w.Body.String(), `"key":"order/42 ü"`)
}

// TestHandler_AmbiguousWithoutEndpoint: the caller's key has records
// under two operations and names neither: 400 endpoint-invalid; naming
// one answers it.
func TestHandler_AmbiguousWithoutEndpoint(t *testing.T) {
	t.Parallel()
	st := newStore(t, "SQLite")
	h := newHandler(t, st, &keystatus.Config{Operations: []string{"payments.create", "refunds.create"}})
	now := time.Now()
	complete(t, st, server.Scope{Principal: "alice", Endpoint: "payments.create", Key: "k"}, now, storedReceipt())
	claim(t, st, server.Scope{Principal: "alice", Endpoint: "refunds.create", Key: "k"}, now)
	w := lookup(t, h, "alice", "/v1/idempotency-keys/k")
	require.Equal(t, http.StatusBadRequest, w.Code)
	requireProblemType(t, w.Body.Bytes(), wire.ProblemEndpointInvalid)
	w = lookup(t, h, "alice", "/v1/idempotency-keys/k?endpoint=refunds.create")
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Body.String(), `"status":"in_progress","endpoint":"refunds.create"`)
}

// TestHandler_StoreDownIs503: a store that cannot be read answers 503
// store-unavailable, never "unknown" (which would read as "no record").
func TestHandler_StoreDownIs503(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	require.NoError(t, err)
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	h := newHandler(t, st, &keystatus.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, db.Close())
	w := lookup(t, h, "alice", "/v1/idempotency-keys/k")
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	requireProblemType(t, w.Body.Bytes(), wire.ProblemStoreUnavailable)
}

// TestHandler_RecordsOfTheMiddleware: what the middleware stores, under
// the operation a route names, is what the lookup reports.
func TestHandler_RecordsOfTheMiddleware(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st server.Store) {
		mw, err := server.New(st, &server.Config{PrincipalFunc: bearer})
		require.NoError(t, err)
		pay := server.Operation(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(receipt))
		}), "payments.create")
		h := newHandler(t, st, &keystatus.Config{Operations: []string{"payments.create"},
			ShowResponseFunc: func(*http.Request, server.Scope, *server.StoredResponse) bool { return true }})
		mux := http.NewServeMux()
		mux.Handle("POST /v1/payments", mw.Wrap(pay))
		mux.Handle("GET /v1/idempotency-keys/{key}", h)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)

		req, err := http.NewRequestWithContext(storetest.Context(t), http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":4000}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "pay-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)

		req, err = http.NewRequestWithContext(storetest.Context(t), http.MethodGet, srv.URL+"/v1/idempotency-keys/pay-1?endpoint=payments.create", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err = srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var a keystatus.Answer
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
		require.Equal(t, keystatus.StatusCompleted, a.Status)
		require.Equal(t, "payments.create", a.Endpoint)
		require.NotNil(t, a.Response)
		body, err := base64.StdEncoding.DecodeString(a.Response.BodyBase64)
		require.NoError(t, err)
		require.Equal(t, receipt, string(body))
		require.Equal(t, "application/json", a.Response.Headers.Get("Content-Type"))
	})
}

func TestNew_Validates(t *testing.T) {
	t.Parallel()
	st := newStore(t, "SQLite")
	for _, tc := range []struct {
		name string
		cfg  *keystatus.Config
		want string
	}{
		{"no principal", nil, "PrincipalFunc"},
		{"empty operation", &keystatus.Config{PrincipalFunc: bearer, Operations: []string{""}}, "Operations"},
		{"duplicate operation", &keystatus.Config{PrincipalFunc: bearer, Operations: []string{"a", "a"}}, "twice"},
		{"short window", &keystatus.Config{PrincipalFunc: bearer, Window: time.Millisecond}, "Window"},
	} {
		_, err := keystatus.New(st, tc.cfg)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	_, err := keystatus.New(nil, &keystatus.Config{PrincipalFunc: bearer})
	require.Error(t, err)
}

func requireProblemType(t *testing.T, body []byte, slug string) {
	t.Helper()
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &p), "body: %s", body)
	require.Equal(t, wire.ProblemType(slug), p.Type)
	require.NotEmpty(t, p.Title)
}
