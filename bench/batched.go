package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// The batched baseline's statements, on a table of its own (batched_keys, the
// shape of handwritten_keys; batched_expiring_keys for expiringMode). %s is
// the table.
const (
	batchedClaim = `INSERT INTO %s (principal, key, fingerprint, expires_at)
VALUES ($1, $2, $3, now() + interval '24 hours') ON CONFLICT DO NOTHING RETURNING true`
	batchedSelect   = `SELECT fingerprint, status, body FROM %s WHERE principal = $1 AND key = $2`
	batchedComplete = `UPDATE %s SET status = $3, body = $4 WHERE principal = $1 AND key = $2`
)

// batched is the idempotent POST as a careful pgx user writes it by hand,
// the server section's baseline: the statements of handwritten, pipelined
// with pgx.Batch on one connection so that a new key costs three round
// trips — [BEGIN; claim], the effect insert, [UPDATE; COMMIT] — and a replay
// two: [BEGIN; claim] (no row: the key exists), [SELECT; COMMIT].
type batched struct {
	pool                 *pgxpool.Pool
	mode                 string // the effect rows' mode
	claim, sel, complete string // the statements on the mode's table
}

// newBatched returns the batched POST of mode on table.
func newBatched(pool *pgxpool.Pool, mode, table string) *batched {
	return &batched{pool: pool, mode: mode,
		claim: fmt.Sprintf(batchedClaim, table), sel: fmt.Sprintf(batchedSelect, table),
		complete: fmt.Sprintf(batchedComplete, table)}
}

func (h *batched) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, principal := r.Header.Get(server.HeaderKey), r.Header.Get(headerAcct)
	if key == "" || principal == "" {
		http.Error(w, "Idempotency-Key and X-Account are required", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fp := sha256.Sum256(body)
	pc, err := h.pool.Acquire(ctx)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer pc.Release()
	conn := pc.Conn()
	defer func() {
		// Whatever failed left a transaction open (or aborted): end it
		// before the connection goes back to the pool.
		if conn.PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()

	var claimed bool
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(h.claim, principal, key, fp[:])
	err = sendBatch(ctx, conn, b, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(&claimed)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		h.replay(w, ctx, conn, principal, key, fp[:])
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	resp, err := payment(ctx, conn, h.mode, r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b = &pgx.Batch{}
	b.Queue(h.complete, principal, key, http.StatusCreated, resp)
	b.Queue("COMMIT")
	if err := sendBatch(ctx, conn, b, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("the completion updated %d rows, want 1", tag.RowsAffected())
		}
		_, err = br.Exec()
		return err
	}); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeCreated(w, resp)
}

// replay answers a key the claim found taken: [SELECT; COMMIT] in the
// transaction the claim opened (it wrote nothing).
func (h *batched) replay(w http.ResponseWriter, ctx context.Context, conn *pgx.Conn, principal, key string, fp []byte) {
	var (
		storedFP []byte
		status   *int16
		stored   []byte
	)
	b := &pgx.Batch{}
	b.Queue(h.sel, principal, key)
	b.Queue("COMMIT")
	if err := sendBatch(ctx, conn, b, func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&storedFP, &status, &stored); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	switch {
	case !bytes.Equal(storedFP, fp):
		http.Error(w, "key reused with a different request", http.StatusUnprocessableEntity)
	case status == nil:
		http.Error(w, "in flight", http.StatusConflict) // not reached: the claim commits completed
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(wire.HeaderReplayed, "true")
		w.WriteHeader(int(*status))
		_, _ = w.Write(stored)
	}
}

// sendBatch sends b on conn in one round trip, reads its results with read
// and closes them, returning read's error first.
func sendBatch(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	br := conn.SendBatch(ctx, b)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
