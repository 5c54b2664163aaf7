package keystatus_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/keystatus"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// The lookup next to the routes the middleware protects, sharing its
// store and its PrincipalFunc.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "keystatus-example-")
	defer os.RemoveAll(dir)
	db, _ := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"))
	defer db.Close()
	store, _ := sqlitestore.New(db, nil)
	_ = store.Migrate(ctx)

	principal := func(r *http.Request) (string, error) {
		account, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || account == "" {
			return "", errors.New("no bearer token")
		}
		return account, nil
	}
	mw, _ := server.New(store, &server.Config{PrincipalFunc: principal})
	lookup, _ := keystatus.New(store, &keystatus.Config{PrincipalFunc: principal})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1"}`)
	})))
	mux.Handle("GET /v1/idempotency-keys/{key}", lookup)

	send := func(method, target, account string) string {
		r := httptest.NewRequest(method, target, strings.NewReader(`{"amount":4000}`))
		r.Header.Set("Authorization", "Bearer "+account)
		r.Header.Set("Idempotency-Key", "order-42")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return strings.TrimSpace(w.Body.String())
	}
	send(http.MethodPost, "/v1/payments", "alice")
	fmt.Println(strings.Split(send(http.MethodGet, "/v1/idempotency-keys/order-42", "alice"), `,"created_at"`)[0])
	fmt.Println(send(http.MethodGet, "/v1/idempotency-keys/order-42", "bob"))
	// Output:
	// {"key":"order-42","status":"completed","endpoint":"*","response_status":201
	// {"key":"order-42","status":"unknown"}
}
