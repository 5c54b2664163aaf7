package redisstore_test

import (
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
)

// A lease-mode middleware on Redis. The handler forwards the downstream key
// so that a second run (after a takeover, or after Redis lost the claim)
// finds the first run's effect instead of making another. Not run: it needs
// a Redis.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, nil) // an *EvictionPolicyError unless maxmemory-policy is noeviction
	if err != nil {
		log.Fatal(err)
	}
	m, err := server.New(store, &server.Config{
		PrincipalFunc: func(r *http.Request) (string, error) { return r.Header.Get("X-Account"), nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /payments", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc, _ := server.ScopeFromContext(r.Context())
		attempt, _ := server.AttemptFromContext(r.Context())
		_ = sc.DownstreamKey() // the payment processor's Idempotency-Key
		_ = attempt.Token      // a fencing token, for a downstream that takes one
		w.WriteHeader(http.StatusCreated)
	})))
}

// A Redis Cluster: every record is one key, so every script runs on one
// slot. New checks maxmemory-policy on every master.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	store, err := redisstore.New(client, &redisstore.Config{Prefix: "payments:", WaitReplicas: 1})
	if err != nil {
		log.Fatal(err)
	}
	_ = store
}
