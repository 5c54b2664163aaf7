package idemriver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/idemriver"
)

// An order and its payment intent commit in one transaction; a started
// Client (in this instance or any other) pays it, once.
func Example_outbox() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return
	}
	defer pool.Close()
	if err := idemriver.Migrate(ctx, pool, ""); err != nil {
		return
	}
	stripe, _ := idemriver.KnownProfile("stripe")
	c, err := idemriver.NewClient(pool, &idemriver.Config{
		Profiles: map[string]idemriver.Profile{"api.stripe.com": stripe},
		SendHookFunc: func(host string, r *http.Request) error {
			if host == "api.stripe.com" {
				r.Header.Set("Authorization", "Bearer "+os.Getenv("STRIPE_KEY")) // never stored
			}
			return nil
		},
	})
	if err != nil {
		return
	}
	if err := c.Start(ctx); err != nil {
		return
	}
	defer c.Stop(context.WithoutCancel(ctx))

	var intent *idemriver.Intent
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, "order-42", 4000); err != nil {
			return err
		}
		intent, err = c.SubmitTx(ctx, tx, &idemriver.Request{
			URL:    "https://api.stripe.com/v1/payment_intents",
			Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}},
			Body:   []byte("amount=4000&currency=eur&confirm=true"),
		})
		return err
	})
	if err != nil {
		return // neither the order nor its payment exists
	}

	in, err := c.Wait(ctx, intent.ID)
	switch {
	case err == nil:
		fmt.Println("paid:", in.Outcome.Status, "replayed:", in.Outcome.Replayed)
	case errors.Is(err, idemriver.StateFailed):
		fmt.Println("declined:", in.Outcome.Status)
	case errors.Is(err, idemriver.StateUnknown), errors.Is(err, idemriver.StateExpired):
		fmt.Println("reconcile with the API: never pay again under a new key")
	}
}
