package idemkit

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/paymentsapi"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/keystatus"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

const usd40 = `{"amount": 4000, "currency": "usd", "description": "groceries"}`

// paymentsFront is the payments example server behind a front that can
// lose POST answers: after the server committed them (dropAfter), or
// before the request reaches it (dropBefore).
type paymentsFront struct {
	app                   *paymentsapi.App
	srv                   *httptest.Server
	dropAfter, dropBefore atomic.Int32
	lookups               atomic.Int32
}

func newPaymentsFront(t *testing.T, backend string) *paymentsFront {
	t.Helper()
	cfg := &paymentsapi.Config{SweepInterval: -1, Logger: discardLogger()}
	if backend == "postgres" {
		cfg.DSN = testpg.SchemaDSN(t) + "&pool_max_conns=4"
	} else {
		cfg.DB = filepath.Join(t.TempDir(), "payments.db")
	}
	app, err := paymentsapi.Open(testkit.Ctx(t), cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	f := &paymentsFront{app: app}
	h := app.Handler()
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/idempotency-keys/") {
			f.lookups.Add(1)
		}
		if r.Method == http.MethodPost {
			switch {
			case f.dropAfter.Add(-1) >= 0:
				h.ServeHTTP(httptest.NewRecorder(), r) // committed on the server...
				hangUp(w)                              // ...and the answer never arrives
				return
			case f.dropBefore.Add(-1) >= 0:
				_, _ = io.Copy(io.Discard, r.Body)
				hangUp(w) // lost on the way: the server never sees it
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func hangUp(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

// tokenHook sends "Bearer alice" first and then an expired token (which
// the payments API refuses with 401) to every attempt, as a credential
// that expired between the lost attempt and its retry.
func tokenHook() func(string, *http.Request) error {
	var calls atomic.Int32
	return func(_ string, r *http.Request) error {
		if calls.Add(1) == 1 {
			r.Header.Set("Authorization", "Bearer alice")
		} else {
			r.Header.Set("Authorization", "Bearer expired!")
		}
		return nil
	}
}

func aliceHook(_ string, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer alice")
	return nil
}

// unknownPayment makes one payment whose answer is lost and whose retry
// gets 401: the intent ends StateUnknown.
func unknownPayment(t *testing.T, b *testBundle, f *paymentsFront) *Intent {
	t.Helper()
	in, err := b.c.Do(testkit.Ctx(t), &Request{URL: f.srv.URL + "/v1/payments",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(usd40)})
	require.ErrorIs(t, err, StateUnknown)
	require.Equal(t, StateUnknown, in.State)
	require.Equal(t, http.StatusUnauthorized, in.Outcome.Status)
	return in
}

// TestReconcile_LostAnswerBecomesSucceeded: through the payments example
// server, a payment's answer is lost after the server committed it and
// the retry's credential has expired: the intent ends unknown. Reconcile,
// with a working credential from the send hook, asks the lookup and
// records the original response: succeeded, replayed, the payment's own
// receipt, and exactly one payment.
func TestReconcile_LostAnswerBecomesSucceeded(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newPaymentsFront(t, backend)
			f.dropAfter.Store(1)
			cfg := testConfig()
			cfg.Logger = discardLogger()
			cfg.SendHookFunc = tokenHook()
			b := setup(t, cfg, nil)
			in := unknownPayment(t, b, f)

			var ended []Event
			cfg2 := testConfig()
			cfg2.Logger = discardLogger()
			cfg2.SendHookFunc = aliceHook
			cfg2.OnEventFunc = func(e Event) { ended = append(ended, e) }
			c2 := b.reopen(t, cfg2)
			got, err := c2.Reconcile(testkit.Ctx(t), nil)
			require.NoError(t, err)
			require.Len(t, got, 1)
			r := got[0]
			require.NoError(t, r.Err)
			require.Equal(t, StateUnknown, r.Was)
			require.Equal(t, "completed", r.Server)
			require.Equal(t, StateSucceeded, r.Intent.State, r.Note)
			require.NotNil(t, r.Intent.Outcome)
			require.Equal(t, http.StatusCreated, r.Intent.Outcome.Status)
			require.True(t, r.Intent.Outcome.Replayed)
			require.Contains(t, r.Intent.LastError, "reconciled")

			payments, err := f.app.Payments(testkit.Ctx(t), "alice")
			require.NoError(t, err)
			require.Len(t, payments, 1, "exactly one payment")
			var receipt struct {
				ID string `json:"id"`
			}
			require.NoError(t, json.Unmarshal(r.Intent.Outcome.Body, &receipt), "%s", r.Intent.Outcome.Body)
			require.Equal(t, payments[0].ID, receipt.ID, "the outcome is the original's response")
			require.Equal(t, "application/json", r.Intent.Outcome.Header.Get("Content-Type"))

			// As stored: Wait now says succeeded.
			w, err := c2.Wait(testkit.Ctx(t), in.ID)
			require.NoError(t, err)
			require.Equal(t, StateSucceeded, w.State)
			require.Len(t, ended, 1)
			require.Equal(t, EventEnded, ended[0].Kind)
			require.Equal(t, StateSucceeded, ended[0].State)

			// Nothing left to reconcile.
			again, err := c2.Reconcile(testkit.Ctx(t), nil)
			require.NoError(t, err)
			require.Empty(t, again)
			require.EqualValues(t, 1, f.lookups.Load())
		})
	}
}

// TestReconcile_NoRecordStaysUnknownAndResendIsSafe: the lost request
// never reached the server: the lookup says "unknown", the intent stays
// unknown with a note that resending under the same key is safe; Resend
// then pays once.
func TestReconcile_NoRecordStaysUnknownAndResendIsSafe(t *testing.T) {
	t.Parallel()
	f := newPaymentsFront(t, "sqlite")
	f.dropBefore.Store(1)
	cfg := testConfig()
	cfg.Logger = discardLogger()
	cfg.SendHookFunc = tokenHook()
	b := setup(t, cfg, nil)
	in := unknownPayment(t, b, f)

	cfg2 := testConfig()
	cfg2.Logger = discardLogger()
	cfg2.SendHookFunc = aliceHook
	c2 := b.reopen(t, cfg2)
	got, err := c2.Reconcile(testkit.Ctx(t), &ReconcileOptions{IDs: []string{in.ID}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, got[0].Err)
	require.Equal(t, "unknown", got[0].Server)
	require.Equal(t, StateUnknown, got[0].Intent.State)
	require.Contains(t, got[0].Note, "no record")
	require.Contains(t, got[0].Note, "safe")
	payments, err := f.app.Payments(testkit.Ctx(t), "alice")
	require.NoError(t, err)
	require.Empty(t, payments)

	_, err = c2.Resend(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	_, err = c2.Drain(testkit.Ctx(t))
	require.NoError(t, err)
	w, err := c2.Wait(testkit.Ctx(t), in.ID)
	require.NoError(t, err)
	require.Equal(t, StateSucceeded, w.State)
	payments, err = f.app.Payments(testkit.Ctx(t), "alice")
	require.NoError(t, err)
	require.Len(t, payments, 1)
}

// lookupServer is a keystatus lookup over a real SQLite store, for the
// answers the payments example cannot be made to give on demand.
type lookupServer struct {
	store server.Store
	srv   *httptest.Server
	// principal is what the lookup's PrincipalFunc returns.
	principal string
}

func newLookupServer(t *testing.T, show bool) *lookupServer {
	t.Helper()
	ctx := testkit.Ctx(t)
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "server.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	ls := &lookupServer{store: st, principal: "acct_1"}
	cfg := &keystatus.Config{PrincipalFunc: func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer acct_1" {
			return "", errors.New("no credential")
		}
		return ls.principal, nil
	}, Operations: []string{"*", "charges.create"}}
	if show {
		cfg.ShowResponseFunc = func(*http.Request, server.Scope, *server.StoredResponse) bool { return true }
	}
	h, err := keystatus.New(st, cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /api/keys/{key}", h)
	ls.srv = httptest.NewServer(mux)
	t.Cleanup(ls.srv.Close)
	return ls
}

// record stores a record of key: completed with resp, or in progress if
// resp is nil.
func (ls *lookupServer) record(t *testing.T, endpoint, key string, resp *server.StoredResponse) {
	t.Helper()
	now := time.Now()
	s := server.Scope{Principal: "acct_1", Endpoint: endpoint, Key: key}
	res, err := ls.store.Claim(testkit.Ctx(t), server.ClaimRequest{Scope: s, Fingerprint: make([]byte, 32), FingerprintVersion: 2,
		Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	if resp != nil {
		require.NoError(t, ls.store.Complete(testkit.Ctx(t), s, res.Token, now, resp))
	}
}

// queueIn submits a request to ls and marks it state, as an intent whose
// answer was lost.
func queueIn(t *testing.T, b *testBundle, url string, state IntentState) *Intent {
	t.Helper()
	in, err := b.c.Submit(testkit.Ctx(t), &Request{URL: url, Body: []byte(`{"amount":1}`)})
	require.NoError(t, err)
	_, err = rawDB(t, b.path).Exec(`UPDATE idemkit_intents SET state = ?, last_error = 'lost' WHERE id = ?`, string(state), in.ID)
	require.NoError(t, err)
	return in
}

func authAcct1(_ string, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer acct_1")
	return nil
}

// TestReconcile_EachAnswer: completed with the response shown (2xx
// succeeded, 4xx failed), completed with the status only, in progress
// and unknown, for unknown and expired intents; at a configured path,
// naming the operation with EndpointFunc.
func TestReconcile_EachAnswer(t *testing.T) {
	t.Parallel()
	ls := newLookupServer(t, true)
	hidden := newLookupServer(t, false)
	cfg := testConfig()
	cfg.Logger = discardLogger()
	cfg.SendHookFunc = authAcct1
	b := setup(t, cfg, nil)

	ok := queueIn(t, b, ls.srv.URL+"/charges", StateUnknown)
	ls.record(t, "charges.create", ok.Key, &server.StoredResponse{Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"charge":1}`)})
	declined := queueIn(t, b, ls.srv.URL+"/charges", StateExpired)
	ls.record(t, "charges.create", declined.Key, &server.StoredResponse{Status: 402, Header: http.Header{}, Body: []byte(`{"declined":true}`)})
	running := queueIn(t, b, ls.srv.URL+"/charges", StateUnknown)
	ls.record(t, "charges.create", running.Key, nil)
	never := queueIn(t, b, ls.srv.URL+"/charges", StateUnknown)
	gone := queueIn(t, b, ls.srv.URL+"/charges", StateExpired)
	statusOnly := queueIn(t, b, hidden.srv.URL+"/charges", StateUnknown)
	hidden.record(t, "charges.create", statusOnly.Key, &server.StoredResponse{Status: 200, Header: http.Header{}, Body: []byte(`secret`)})
	done := queueIn(t, b, ls.srv.URL+"/charges", StateFailed) // not asked about

	var endpoints []string
	got, err := b.c.Reconcile(testkit.Ctx(t), &ReconcileOptions{LookupPath: "/api/keys/{key}",
		EndpointFunc: func(in *Intent) string { endpoints = append(endpoints, in.ID); return "charges.create" }})
	require.NoError(t, err)
	byID := map[string]*Reconciliation{}
	for _, r := range got {
		require.NoError(t, r.Err, r.Intent.ID)
		byID[r.Intent.ID] = r
	}
	require.Len(t, byID, 6)
	require.NotContains(t, byID, done.ID)
	require.Len(t, endpoints, 6)

	r := byID[ok.ID]
	require.Equal(t, StateSucceeded, r.Intent.State)
	require.Equal(t, `{"charge":1}`, string(r.Intent.Outcome.Body))
	require.True(t, r.Intent.Outcome.Replayed)

	r = byID[declined.ID]
	require.Equal(t, StateExpired, r.Was)
	require.Equal(t, StateFailed, r.Intent.State)
	require.Equal(t, 402, r.Intent.Outcome.Status)
	require.Equal(t, `{"declined":true}`, string(r.Intent.Outcome.Body))

	r = byID[running.ID]
	require.Equal(t, "in_progress", r.Server)
	require.Equal(t, StateUnknown, r.Intent.State)
	require.Contains(t, r.Note, "later")

	r = byID[never.ID]
	require.Equal(t, "unknown", r.Server)
	require.Equal(t, StateUnknown, r.Intent.State)
	require.Contains(t, r.Note, "safe")

	r = byID[gone.ID]
	require.Equal(t, "unknown", r.Server)
	require.Equal(t, StateExpired, r.Intent.State, "an expired intent with no record stays expired")
	require.Contains(t, r.Note, "could take effect twice")

	r = byID[statusOnly.ID]
	require.Equal(t, StateSucceeded, r.Intent.State)
	require.Equal(t, 200, r.Intent.Outcome.Status)
	require.Empty(t, r.Intent.Outcome.Body, "the lookup showed the status only")
	require.Contains(t, r.Intent.LastError, "not shown")
}

// TestReconcile_NoLookup: a host speaking another profile, and a host
// without the lookup (404), are ErrNoLookup; the intent is unchanged.
func TestReconcile_NoLookup(t *testing.T) {
	t.Parallel()
	bare := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(bare.Close)
	stripeHost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a host without a lookup was asked: %s", r.URL)
	}))
	t.Cleanup(stripeHost.Close)
	stripe, _ := KnownProfile("stripe")
	cfg := testConfig()
	cfg.Logger = discardLogger()
	cfg.Profiles = map[string]Profile{strings.TrimPrefix(stripeHost.URL, "http://"): stripe}
	b := setup(t, cfg, nil)
	a := queueIn(t, b, bare.URL+"/charges", StateUnknown)
	s := queueIn(t, b, stripeHost.URL+"/v1/charges", StateUnknown)
	got, err := b.c.Reconcile(testkit.Ctx(t), nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, r := range got {
		require.ErrorIs(t, r.Err, ErrNoLookup, r.Intent.ID)
		require.Empty(t, r.Server)
		require.Equal(t, StateUnknown, r.Intent.State)
		require.Contains(t, []string{a.ID, s.ID}, r.Intent.ID)
	}
}

// TestReconcile_RefusedLookupChangesNothing: a lookup answered 401 (no
// working credential) is an error of that intent, which stays unknown.
func TestReconcile_RefusedLookupChangesNothing(t *testing.T) {
	t.Parallel()
	ls := newLookupServer(t, true)
	cfg := testConfig()
	cfg.Logger = discardLogger()
	b := setup(t, cfg, nil) // no send hook: no credential
	in := queueIn(t, b, ls.srv.URL+"/charges", StateUnknown)
	ls.record(t, "*", in.Key, &server.StoredResponse{Status: 201, Header: http.Header{}, Body: []byte(`{}`)})
	got, err := b.c.Reconcile(testkit.Ctx(t), &ReconcileOptions{LookupPath: "/api/keys/{key}"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.ErrorContains(t, got[0].Err, "401")
	require.NotErrorIs(t, got[0].Err, ErrNoLookup)
	require.Equal(t, StateUnknown, got[0].Intent.State)
}

func TestReconcileOptions_Validate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	for _, o := range []*ReconcileOptions{
		{States: []IntentState{StateFailed}},
		{LookupPath: "no-slash/{key}"},
		{LookupPath: "/keys"},
		{LookupPath: "/keys/{key}?x=1"},
	} {
		_, err := b.c.Reconcile(testkit.Ctx(t), o)
		require.Error(t, err, "%+v", o)
	}
	_, err := b.c.Reconcile(testkit.Ctx(t), &ReconcileOptions{IDs: []string{"nope"}})
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, b.c.Close())
	_, err = b.c.Reconcile(testkit.Ctx(t), nil)
	require.ErrorIs(t, err, ErrClosed)
}
