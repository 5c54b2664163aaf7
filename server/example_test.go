package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// newExampleStore opens a migrated SQLite store in a temporary directory.
func newExampleStore(ctx context.Context) (*sqlitestore.Store, func()) {
	dir, err := os.MkdirTemp("", "idemkit-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return store, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

func post(url, key, body string) *http.Response {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer acct_42")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	return resp
}

// principal is the account behind the request's bearer token.
func principal(r *http.Request) (string, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", errors.New("no bearer token")
	}
	return token, nil
}

// A payment endpoint in lease mode: the second request with the same key is
// answered from the store and the handler runs once.
func Example() {
	ctx := context.Background()
	store, closeStore := newExampleStore(ctx)
	defer closeStore()

	m, err := server.New(store, &server.Config{PrincipalFunc: principal})
	if err != nil {
		log.Fatal(err)
	}
	var charges atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /payments", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1) // the effect: charge the card once
		sc, _ := server.ScopeFromContext(r.Context())
		_ = sc.DownstreamKey() // forward it as the processor's idempotency key
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":"pay_%d"}`, n)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 2 {
		resp := post(srv.URL+"/payments", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":4000,"currency":"EUR"}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true",
			"window:", resp.Header.Get("Idempotency-Window"))
	}
	// The same key with a different amount is a client bug.
	resp := post(srv.URL+"/payments", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":400000,"currency":"EUR"}`)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	fmt.Println("charges:", charges.Load())
	// Output:
	// 201 {"payment":"pay_1"} replayed: false window: 86400
	// 201 {"payment":"pay_1"} replayed: true window: 86400
	// 422 application/problem+json
	// charges: 1
}

// In transactional mode the handler writes its effect on the request's
// transaction; the claim, the effect and the stored response commit together.
// A 5xx rolls all three back, so the retry runs again.
func ExampleModeTransactional() {
	ctx := context.Background()
	store, closeStore := newExampleStore(ctx)
	defer closeStore()
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE payments (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL) STRICT`); err != nil {
		log.Fatal(err)
	}

	m, err := server.New(store, &server.Config{PrincipalFunc: principal, Mode: server.ModeTransactional})
	if err != nil {
		log.Fatal(err)
	}
	var fail atomic.Bool
	fail.Store(true)
	mux := http.NewServeMux()
	mux.Handle("POST /payments", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := sqlitestore.Tx(r.Context())
		res, err := tx.ExecContext(r.Context(), `INSERT INTO payments (amount) VALUES (4000)`)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if fail.CompareAndSwap(true, false) {
			http.Error(w, "ledger unavailable", http.StatusServiceUnavailable) // rolls the insert back
			return
		}
		id, _ := res.LastInsertId()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d", id)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for range 3 {
		resp := post(srv.URL+"/payments", "key-1", `{"amount":4000}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var n int
	if err := store.DB().QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("payments:", n)
	// Output:
	// 503 ledger unavailable
	// 201 payment 1
	// 201 payment 1
	// payments: 1
}

// OnEventFunc sees one Event per keyed request: log it, count it, trace it.
func ExampleConfig_onEventFunc() {
	ctx := context.Background()
	store, closeStore := newExampleStore(ctx)
	defer closeStore()

	events := make(chan server.Event, 8)
	m, err := server.New(store, &server.Config{
		PrincipalFunc: principal,
		OnEventFunc: func(r *http.Request, e server.Event) {
			// In production: slog.InfoContext(r.Context(), "idempotency",
			//	"outcome", e.Outcome, "status", e.Status, "key", e.Scope.Key, ...)
			events <- e
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, body := range []string{`{"amount":1}`, `{"amount":1}`, `{"amount":2}`} {
		resp := post(srv.URL+"/payments", "k", body)
		resp.Body.Close()
		e := <-events
		fmt.Println(e.Outcome, e.Status, e.Scope.Principal, e.Scope.Endpoint, e.Scope.Key)
	}
	// Output:
	// executed 201 acct_42 * k
	// replayed 201 acct_42 * k
	// mismatch 422 acct_42 * k
}
