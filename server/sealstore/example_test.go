package sealstore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// A store whose responses are sealed: the middleware (server.New) takes
// it in place of the inner store. A key file holds 64 hex digits, made
// with `openssl rand -hex 32`.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sealstore-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "idem.key")
	if err := os.WriteFile(keyFile, []byte("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"), 0o600); err != nil {
		log.Fatal(err)
	}

	db, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	inner, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := inner.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	key, err := sealstore.ReadKeyFile(keyFile)
	if err != nil {
		log.Fatal(err)
	}
	store, err := sealstore.New(inner, &sealstore.Config{Keys: map[string][]byte{sealstore.KeyID(key): key}})
	if err != nil {
		log.Fatal(err)
	}

	// What the middleware does with a new key: claim, then complete.
	now := time.Now()
	sc := server.Scope{Principal: "acct_1", Endpoint: "*", Key: "order-1234"}
	res, err := store.Claim(ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: now, ExpiresAt: now.Add(24 * time.Hour), LockedUntil: now.Add(30 * time.Second)})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Complete(ctx, sc, res.Token, now, &server.StoredResponse{Status: 201, Body: []byte(`{"id":"pay_1"}`)}); err != nil {
		log.Fatal(err)
	}

	sealed, _ := inner.Get(ctx, sc, now)
	opened, _ := store.Get(ctx, sc, now)
	fmt.Println("inner store holds:", sealed.Response.Header.Get("Idemkit-Sealed") == "1", len(sealed.Response.Body) > len(`{"id":"pay_1"}`))
	fmt.Println("replayed:", opened.Response.Status, string(opened.Response.Body))
	// Output:
	// inner store holds: true true
	// replayed: 201 {"id":"pay_1"}
}
