// Command outbox is a shop whose order endpoint writes the order and its
// payment intent in one PostgreSQL transaction (the transactional outbox), and
// whose workers, in as many processes as you like, drain the intents with
// idemriver: each order is paid exactly once, whichever worker dies when.
//
//	go run ./examples/payments --addr :8080 &                      # the downstream payments API
//	go run ./examples/outbox --dsn "$DSN" --role serve --addr :8081 &
//	go run ./examples/outbox --dsn "$DSN" --role worker --name a &
//	go run ./examples/outbox --dsn "$DSN" --role worker --name b &
//	curl -s -X POST localhost:8081/orders -d '{"amount": 4000, "currency": "EUR"}'
//
// See README.md, which also shows how to watch the queue in River's UI.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/idemriver"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

type options struct {
	dsn, role, addr, name, paymentsURL, account string
	workers                                     int
	lease                                       time.Duration
}

func run(args []string) error {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.dsn, "dsn", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	fs.StringVar(&o.role, "role", "all", "serve (the order endpoint), worker (drain the intents) or all")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8081", "address of the order endpoint (serve, all)")
	fs.StringVar(&o.name, "name", "worker", "this worker's name, sent as X-Worker with its attempts")
	fs.StringVar(&o.paymentsURL, "payments-url", "http://127.0.0.1:8080", "the payments API (examples/payments)")
	fs.StringVar(&o.account, "account", "shop", "the shop's account at the payments API (its bearer token)")
	fs.IntVar(&o.workers, "workers", 4, "intents one worker process sends at once")
	fs.DurationVar(&o.lease, "lease", 2*time.Minute, "how long before another worker takes over an intent whose worker died")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.dsn == "" {
		return errors.New("--dsn (or DATABASE_URL) is required: the orders and the queue live in PostgreSQL")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(ctx, o.dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}
	shop, err := newShop(pool, &o)
	if err != nil {
		return err
	}
	logger := slog.Default()
	if o.role == "worker" || o.role == "all" {
		if err := shop.intents.Start(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = shop.intents.Stop(sctx)
		}()
		logger.Info("outbox: worker draining payment intents", "name", o.name, "workers", o.workers)
	}
	if o.role == "serve" || o.role == "all" {
		srv := &http.Server{Addr: o.addr, Handler: shop.handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			_ = srv.Shutdown(context.Background())
		}()
		logger.Info("outbox: order endpoint", "addr", o.addr)
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	<-ctx.Done()
	return nil
}

// migrate creates River's tables, idemriver's and the shop's orders.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := idemriver.Migrate(ctx, pool, ""); err != nil {
		return err
	}
	// Processes started together race to create the table: CREATE TABLE IF
	// NOT EXISTS is not safe against itself, so they take turns.
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('outbox.orders', 0))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (
			id text PRIMARY KEY,
			amount bigint NOT NULL,
			currency text NOT NULL,
			payment_intent text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now()
		)`)
		return err
	})
}

// shop is the order endpoint and the payment intents.
type shop struct {
	pool    *pgxpool.Pool
	intents *idemriver.Client
	o       *options
}

func newShop(pool *pgxpool.Pool, o *options) (*shop, error) {
	c, err := idemriver.NewClient(pool, &idemriver.Config{
		MaxWorkers:    o.workers,
		LeaseDuration: o.lease,
		// The downstream's credential is added at send time, by whichever
		// worker sends the intent: it is never stored in the queue.
		SendHookFunc: func(_ string, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+o.account)
			r.Header.Set("X-Worker", o.name)
			return nil
		},
		AttemptTimeout: min(30*time.Second, o.lease/2),
	})
	if err != nil {
		return nil, err
	}
	return &shop{pool: pool, intents: c, o: o}, nil
}

// order is the body of POST /orders and of its answer.
type order struct {
	ID            string `json:"id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentIntent string `json:"payment_intent"`
	// Payment is the intent's state (GET /orders/{id}).
	Payment string `json:"payment,omitempty"`
}

// place writes the order and its payment intent in one transaction: both
// exist, or neither does.
func (s *shop) place(ctx context.Context, amount int64, currency string) (*order, error) {
	o := &order{ID: uuid.NewString(), Amount: amount, Currency: currency}
	body, err := json.Marshal(map[string]any{"amount": amount, "currency": currency, "description": "order " + o.ID})
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		in, err := s.intents.SubmitTx(ctx, tx, &idemriver.Request{
			URL:    s.o.paymentsURL + "/v1/payments",
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   body,
		})
		if err != nil {
			return err
		}
		o.PaymentIntent = in.ID
		_, err = tx.Exec(ctx, `INSERT INTO orders (id, amount, currency, payment_intent) VALUES ($1, $2, $3, $4)`,
			o.ID, o.Amount, o.Currency, o.PaymentIntent)
		return err
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

func (s *shop) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount   int64  `json:"amount"`
			Currency string `json:"currency"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10)).Decode(&req); err != nil || req.Amount <= 0 || len(req.Currency) != 3 {
			problem(w, http.StatusBadRequest, "invalid-order", "the body must be {\"amount\": positive integer, \"currency\": three letters}")
			return
		}
		o, err := s.place(r.Context(), req.Amount, req.Currency)
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "unavailable", "the order could not be written")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/"+o.ID)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(o)
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		o := &order{}
		err := s.pool.QueryRow(r.Context(), `SELECT id, amount, currency, payment_intent FROM orders WHERE id = $1`, r.PathValue("id")).
			Scan(&o.ID, &o.Amount, &o.Currency, &o.PaymentIntent)
		if errors.Is(err, pgx.ErrNoRows) {
			problem(w, http.StatusNotFound, "not-found", "no such order")
			return
		}
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "unavailable", "the order could not be read")
			return
		}
		if in, err := s.intents.Get(r.Context(), o.PaymentIntent); err == nil {
			o.Payment = string(in.State)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(o)
	})
	return mux
}

func problem(w http.ResponseWriter, status int, slug, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://github.com/idemkit/idemkit/blob/main/examples/outbox/README.md#" + slug, "title": slug, "status": status, "detail": detail})
}
