package idemkit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idemkit"
)

// exampleQueue returns a fresh queue path and a cleanup function.
func exampleQueue() (string, func()) {
	dir, err := os.MkdirTemp("", "idemkit-example")
	if err != nil {
		log.Fatal(err)
	}
	return filepath.Join(dir, "queue.db"), func() { os.RemoveAll(dir) }
}

// A server that answers 503 once: Do retries with the same key.
func ExampleClient_Do() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"charge":"ch_1"}`)
	}))
	defer srv.Close()
	path, cleanup := exampleQueue()
	defer cleanup()

	ctx := context.Background()
	c, err := idemkit.Open(ctx, path, &idemkit.Config{
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer sk_test") // added at send time, never stored
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	in, err := c.Do(ctx, &idemkit.Request{
		URL:    srv.URL + "/charges",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"amount":4000}`),
		Key:    "order-1234-payment",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.State, in.Attempts, in.Outcome.Status, string(in.Outcome.Body))
	// Output: succeeded 2 201 {"charge":"ch_1"}
}

// Submit persists; Run sends; Wait reports.
func ExampleClient_Run() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true") // as if an earlier attempt had done it
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	path, cleanup := exampleQueue()
	defer cleanup()

	ctx, cancel := context.WithCancel(context.Background())
	c, err := idemkit.Open(ctx, path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()

	in, err := c.Submit(ctx, &idemkit.Request{URL: srv.URL + "/orders"})
	if err != nil {
		log.Fatal(err)
	}
	in, err = c.Wait(ctx, in.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.State, in.Outcome.Replayed)
	cancel()
	<-done
	// Output: succeeded true
}

// A 422 means the key was used before for another request.
func ExampleErrKeyReused() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The idemkit server's answer to a key reused with another request.
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused","status":422}`)
	}))
	defer srv.Close()
	path, cleanup := exampleQueue()
	defer cleanup()

	c, err := idemkit.Open(context.Background(), path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	in, err := c.Do(context.Background(), &idemkit.Request{URL: srv.URL, Key: "reused"})
	fmt.Println(errors.Is(err, idemkit.ErrKeyReused), errors.Is(err, idemkit.StateFailed), in.State)
	// Output: true true failed
}

// SubmitTx queues an intent in the caller's own transaction: it is sent only
// if the transaction commits.
func ExampleClient_SubmitTx() {
	path, cleanup := exampleQueue()
	defer cleanup()
	ctx := context.Background()
	c, err := idemkit.Open(ctx, path, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Open a second handle on the same file for the application's own
	// writes (any *sql.DB on the queue file works).
	db, err := openSQLite(path)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES ('o-1')`); err != nil {
		log.Fatal(err)
	}
	in, err := c.SubmitTx(ctx, tx, &idemkit.Request{URL: "https://api.example.com/fulfil", Key: "o-1-fulfil"})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	got, err := c.Get(ctx, in.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.Key, got.State)
	// Output: o-1-fulfil pending
}

// Each host speaks its own idempotency dialect: here a server answering as
// Stripe does to a key reused with other parameters.
func ExampleKnownProfile() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("key sent in", "Idempotency-Key:", r.Header.Get("Idempotency-Key") == "order-42")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`)
	}))
	defer srv.Close()
	path, cleanup := exampleQueue()
	defer cleanup()

	stripe, _ := idemkit.KnownProfile("stripe")
	host := strings.TrimPrefix(srv.URL, "http://") // "api.stripe.com" in real life
	c, err := idemkit.Open(context.Background(), path, &idemkit.Config{
		Profiles: map[string]idemkit.Profile{host: stripe},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.Do(context.Background(), &idemkit.Request{URL: srv.URL + "/v1/charges", Key: "order-42"})
	fmt.Println(errors.Is(err, idemkit.ErrKeyReused))
	// Output:
	// key sent in Idempotency-Key: true
	// true
}

// An agent queues its work first (no network needed), then drains the
// queue; Config.OnEventFunc observes every step.
func ExampleClient_Drain() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	path, cleanup := exampleQueue()
	defer cleanup()

	ctx := context.Background()
	c, err := idemkit.Open(ctx, path, &idemkit.Config{
		OnEventFunc: func(e idemkit.Event) {
			switch e.Kind {
			case idemkit.EventAnswered:
				fmt.Printf("%s attempt %d: %d\n", e.Key, e.Attempt, e.Status)
			case idemkit.EventRetrying:
				fmt.Printf("%s retrying: %s\n", e.Key, e.Reason)
			case idemkit.EventEnded:
				fmt.Printf("%s %s\n", e.Key, e.State)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Submit(ctx, &idemkit.Request{URL: srv.URL + "/charges", Body: []byte(`{"amount":4000}`), Key: "order-7"}); err != nil {
		log.Fatal(err)
	}
	counts, err := c.Drain(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("succeeded:", counts[idemkit.StateSucceeded], "pending:", counts[idemkit.StatePending])
	// Output:
	// order-7 attempt 1: 503
	// order-7 retrying: status 503
	// order-7 attempt 2: 201
	// order-7 succeeded
	// succeeded: 1 pending: 0
}
