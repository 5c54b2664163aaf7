package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

// A duplicate request waits for its original: subscribe first, then read
// the record, then wait for the change (or a poll interval, as a fallback:
// a notification lost with the listener's connection costs one interval).
// server.Config.WaitInFlight does this for you; NotifyChanges must be set
// on every replica.
func ExampleStore_SubscribeChange() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	store, err := pgstore.New(pool, &pgstore.Config{NotifyChanges: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // stops the listener connection

	sc := server.Scope{Principal: "acct_1", Endpoint: "POST /payments", Key: "7c1e"}
	deadline := time.After(10 * time.Second)
	for {
		changed, stop, err := store.SubscribeChange(ctx, sc)
		if err != nil {
			changed, stop = nil, func() {} // the listener is down: poll
		}
		rec, err := store.Get(ctx, sc, time.Now())
		if err != nil || rec.State == server.StateCompleted {
			stop()
			return // replay rec.Response, or claim the key afresh
		}
		select {
		case <-changed:
		case <-time.After(time.Second):
		case <-deadline:
			stop()
			return // 409 with Retry-After, as without waiting
		}
		stop()
	}
}
