package server_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/idemkit/idemkit/server"
)

// AuthorizeReplayFunc checks the caller again before a replay: here an
// account revoked after its payment no longer reads the stored receipt.
// Authentication wraps the middleware, so the request carries the caller's
// current state when the hook runs.
func ExampleConfig_authorizeReplayFunc() {
	ctx := context.Background()
	store, closeStore := newExampleStore(ctx)
	defer closeStore()

	var mu sync.Mutex
	revoked := map[string]bool{}
	m, err := server.New(store, &server.Config{
		PrincipalFunc: principal,
		AuthorizeReplayFunc: func(r *http.Request, rp server.Replay) error {
			mu.Lock()
			defer mu.Unlock()
			if revoked[rp.Principal] {
				return errors.New("account revoked")
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	pay := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, `{"receipt":"r_1"}`)
	}))
	// authenticate runs first: it would verify the token and put the
	// caller's identity and permissions in the request's context.
	authenticate := func(next http.Handler) http.Handler { return next }
	mux := http.NewServeMux()
	mux.Handle("POST /payments", authenticate(pay))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp := post(srv.URL+"/payments", "k", `{"amount":1}`)
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	mu.Lock()
	revoked["acct_42"] = true
	mu.Unlock()
	resp = post(srv.URL+"/payments", "k", `{"amount":1}`)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output:
	// 201
	// 403 application/problem+json
}
