// Command idemkit is the binary-size check's PostgreSQL-only API: the same
// payments POST as ../baseline, its idempotency done by idemkit's server
// middleware in transactional mode over server/pgstore. It links pgx and
// net/http, and must link neither SQLite nor Prometheus.
package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

const schema = `CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, amount bigint NOT NULL, currency text NOT NULL)`

type payment struct {
	ID       int64  `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		log.Fatal(err)
	}
	mw, err := server.New(store, &server.Config{
		Mode:          server.ModeTransactional,
		PrincipalFunc: func(r *http.Request) (string, error) { return r.Header.Get("X-Account"), nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(pay)))
	log.Fatal(http.ListenAndServe(":8080", mux))
}

func pay(w http.ResponseWriter, r *http.Request) {
	var p payment
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &p)
	}
	if err != nil {
		http.Error(w, "a JSON body is required", http.StatusBadRequest)
		return
	}
	tx, ok := pgstore.Tx(r.Context())
	if !ok {
		http.Error(w, "not in a transaction", http.StatusInternalServerError)
		return
	}
	if err := tx.QueryRow(r.Context(), `INSERT INTO payments (amount, currency) VALUES ($1, $2) RETURNING id`, p.Amount, p.Currency).Scan(&p.ID); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}
