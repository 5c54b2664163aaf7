// Command baseline is the yardstick of the binary-size check: a payments
// API that protects POST /payments with a hand-written idempotency table on
// PostgreSQL, using only pgx and net/http. Its size is what an API pays
// without idemkit; bench/binsize compares the same API built on idemkit's
// server and pgstore packages with it.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const schema = `
CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, amount bigint NOT NULL, currency text NOT NULL);
CREATE TABLE IF NOT EXISTS idempotency (
    key text PRIMARY KEY, fingerprint bytea NOT NULL, status int, body bytea,
    expires_at timestamptz NOT NULL DEFAULT now() + interval '24 hours')`

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
	if _, err := pool.Exec(ctx, schema); err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) { pay(pool, w, r) })
	log.Fatal(http.ListenAndServe(":8080", mux))
}

func pay(pool *pgxpool.Pool, w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if key == "" || err != nil {
		http.Error(w, "Idempotency-Key and a body are required", http.StatusBadRequest)
		return
	}
	var p payment
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fp := sha256.Sum256(body)
	tx, err := pool.Begin(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var claimed bool
	err = tx.QueryRow(ctx, `INSERT INTO idempotency (key, fingerprint) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true`, key, fp[:]).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		var (
			storedFP []byte
			status   *int
			stored   []byte
		)
		if err := tx.QueryRow(ctx, `SELECT fingerprint, status, body FROM idempotency WHERE key = $1`, key).Scan(&storedFP, &status, &stored); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		switch {
		case !bytes.Equal(storedFP, fp[:]):
			http.Error(w, "key reused with a different request", http.StatusUnprocessableEntity)
		case status == nil:
			http.Error(w, "in flight", http.StatusConflict)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(*status)
			_, _ = w.Write(stored)
		}
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err := tx.QueryRow(ctx, `INSERT INTO payments (amount, currency) VALUES ($1, $2) RETURNING id`, p.Amount, p.Currency).Scan(&p.ID); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, _ := json.Marshal(p)
	if _, err := tx.Exec(ctx, `UPDATE idempotency SET status = 201, body = $2 WHERE key = $1`, key, resp); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(resp)
}
