package recoverer_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/recoverer"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// charges is a stand-in for a payment processor that can be asked for a
// charge by the idempotency key it was made with.
var charges = map[string]string{}

// A RecoverFunc asks the downstream by the forwarded key: a charge found
// is rendered as the handler renders it, a charge not found releases the
// claim, and anything else leaves it for a later pass.
func Example() {
	dir, _ := os.MkdirTemp("", "recoverer-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, _ := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"))
	defer db.Close()
	store, _ := sqlitestore.New(db, nil)
	_ = store.Migrate(ctx)

	// A holder claimed "order-1" with a 10ms lease, charged, and died.
	now := time.Now()
	res, _ := store.Claim(ctx, server.ClaimRequest{
		Scope:       server.Scope{Principal: "alice", Endpoint: "*", Key: "order-1"},
		Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(10 * time.Millisecond),
	})
	charges[server.Scope{Principal: "alice", Endpoint: "*", Key: "order-1"}.DownstreamKey()] = "ch_1"
	fmt.Println("claimed with token", res.Token)

	r, err := recoverer.New(store, func(ctx context.Context, c recoverer.Claim) (*server.StoredResponse, error) {
		id, ok := charges[c.DownstreamKey]
		if !ok {
			return nil, nil // never charged: release
		}
		return &server.StoredResponse{
			Status: http.StatusCreated,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   []byte(`{"charge":"` + id + `"}`),
		}, nil
	}, &recoverer.Config{
		MinAge: time.Millisecond,
		OnEventFunc: func(e recoverer.Event) {
			if e.Outcome != recoverer.OutcomeSkipped { // skipped: the lease has not lapsed yet
				fmt.Println(e.Scope.Key, e.Outcome, "with token", e.Token)
			}
		},
	})
	if errors.Is(err, recoverer.ErrNoListing) {
		return // this store cannot list its claims
	}
	// Start(store, fn, cfg) runs passes every Config.Interval; here, run
	// them by hand until the lease has lapsed and the claim is recovered.
	for r.Stats().Outcomes[recoverer.OutcomeCompleted] == 0 {
		_ = r.Pass(ctx)
	}

	rec, _ := store.Get(ctx, server.Scope{Principal: "alice", Endpoint: "*", Key: "order-1"}, time.Now())
	fmt.Println(rec.State, string(rec.Response.Body))
	// Output:
	// claimed with token 1
	// order-1 completed with token 2
	// completed {"charge":"ch_1"}
}
