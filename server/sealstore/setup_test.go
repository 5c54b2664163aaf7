package sealstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/storetest"
)

// Keys of the tests: fixed, so that a test can reopen a store with another
// key set.
var (
	key1    = bytes.Repeat([]byte{0x11}, sealstore.KeySize)
	key2    = bytes.Repeat([]byte{0x22}, sealstore.KeySize)
	hashKey = bytes.Repeat([]byte{0x33}, 32)
)

// backend is a real database behind an inner store, with raw SQL access
// to its idempotency_keys table and an effects table a handler writes on
// the transaction's Handle.
type backend struct {
	name  string
	inner server.Store
	// exec runs a statement written with $1-style placeholders.
	exec func(ctx context.Context, query string, args ...any) (int64, error)
	// queryBytes reads one bytes column of one row.
	queryBytes func(ctx context.Context, query string, args ...any) ([]byte, error)
	// effect writes an effect row on a transactional request's driver
	// transaction, found with the driver package's Tx(ctx).
	effect func(r *http.Request) error
	// effects counts the effect rows.
	effects func(ctx context.Context) (int, error)
	// path is the SQLite file; empty on PostgreSQL.
	path string
}

const effectsTable = "CREATE TABLE effects (id INTEGER NOT NULL)"

var backends = []string{"SQLite", "Postgres"}

func newBackend(t testing.TB, name string) *backend {
	t.Helper()
	if name == "SQLite" {
		return newSQLiteBackend(t)
	}
	return newPostgresBackend(t)
}

func newSQLiteBackend(t testing.TB) *backend {
	t.Helper()
	ctx := storetest.Context(t)
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sqlitestore.Open(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	st, err := sqlitestore.New(db, &sqlitestore.Config{SweepChunkSize: 3})
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	_, err = db.ExecContext(ctx, effectsTable)
	require.NoError(t, err)
	sqlite := func(q string) string { return strings.ReplaceAll(q, "$", "?") }
	return &backend{
		name:  "SQLite",
		inner: st,
		path:  path,
		exec: func(ctx context.Context, q string, args ...any) (int64, error) {
			res, err := db.ExecContext(ctx, sqlite(q), args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		},
		queryBytes: func(ctx context.Context, q string, args ...any) ([]byte, error) {
			var b []byte
			err := db.QueryRowContext(ctx, sqlite(q), args...).Scan(&b)
			return b, err
		},
		effect: func(r *http.Request) error {
			tx, ok := sqlitestore.Tx(r.Context())
			if !ok {
				return errors.New("sqlitestore.Tx found no transaction")
			}
			_, err := tx.ExecContext(r.Context(), "INSERT INTO effects (id) VALUES (1)")
			return err
		},
		effects: func(ctx context.Context) (n int, err error) {
			err = db.QueryRowContext(ctx, "SELECT count(*) FROM effects").Scan(&n)
			return n, err
		},
	}
}

func newPostgresBackend(t testing.TB) *backend {
	t.Helper()
	ctx := storetest.Context(t)
	pool := testpg.Pool(t)
	st, err := pgstore.New(pool, &pgstore.Config{SweepChunkSize: 3})
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	_, err = pool.Exec(ctx, effectsTable)
	require.NoError(t, err)
	// The conformance suite moves time: the store decides by the callers'
	// clock, as pgstore's own tests make it.
	require.True(t, sqlstore.CallerClock(st))
	return postgresBackend(pool, st)
}

func postgresBackend(pool *pgxpool.Pool, st server.Store) *backend {
	return &backend{
		name:  "Postgres",
		inner: st,
		exec: func(ctx context.Context, q string, args ...any) (int64, error) {
			tag, err := pool.Exec(ctx, q, args...)
			return tag.RowsAffected(), err
		},
		queryBytes: func(ctx context.Context, q string, args ...any) ([]byte, error) {
			var b []byte
			err := pool.QueryRow(ctx, q, args...).Scan(&b)
			return b, err
		},
		effect: func(r *http.Request) error {
			tx, ok := pgstore.Tx(r.Context())
			if !ok {
				return errors.New("pgstore.Tx found no transaction")
			}
			_, err := tx.Exec(r.Context(), "INSERT INTO effects (id) VALUES (1)")
			return err
		},
		effects: func(ctx context.Context) (n int, err error) {
			err = pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n)
			return n, err
		},
	}
}

// seal returns a sealstore over b's inner store with cfg.
func (b *backend) seal(t testing.TB, cfg *sealstore.Config) *sealstore.Store {
	t.Helper()
	st, err := sealstore.New(b.inner, cfg)
	require.NoError(t, err)
	return st
}

// receiptBody and receiptHeader are what a payment's response holds that
// must never be found in the clear at rest.
const (
	receiptBody   = "RECEIPT-PLAINTEXT-4242"
	receiptHeader = "/v1/payments/pay_LOCATION-PLAINTEXT"
)

// api is the payments handler behind a real middleware over a Store. In
// transactional mode the handler writes its effect on the driver
// transaction it finds through the store's Handle.
type api struct {
	srv  *httptest.Server
	runs atomic.Int64
}

func newAPI(t testing.TB, b *backend, store server.Store, mode server.Mode) *api {
	t.Helper()
	a := &api{}
	m, err := server.New(store, &server.Config{
		PrincipalFunc: func(r *http.Request) (string, error) {
			if p := r.Header.Get("X-Principal"); p != "" {
				return p, nil
			}
			return "", errors.New("no X-Principal header")
		},
		Mode:   mode,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.runs.Add(1)
		if mode != server.ModeTransactional {
			// Lease mode: the effect lives elsewhere.
		} else if err := b.effect(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", receiptHeader)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": fmt.Sprintf("pay_%d", n), "card_last4": "4242", "receipt": receiptBody})
	})))
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// answer is one response of the API.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(a.body, &p)
	return p.Type
}

// pay posts a payment as principal with key.
func (a *api) pay(t testing.TB, principal, key string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.srv.URL+"/v1/payments", strings.NewReader(`{"amount":4000,"currency":"USD"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Principal", principal)
	req.Header.Set(server.HeaderKey, key)
	resp, err := a.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: body}
}

// requireReplay requires a to be the replay of first.
func requireReplay(t testing.TB, first, a answer) {
	t.Helper()
	require.Equal(t, http.StatusCreated, a.status, "replay status; body %s", a.body)
	require.Equal(t, "true", a.header.Get(wire.HeaderReplayed))
	require.Equal(t, string(first.body), string(a.body))
	require.Equal(t, first.header.Get("Location"), a.header.Get("Location"))
	require.Equal(t, first.header.Get("Content-Type"), a.header.Get("Content-Type"))
}

// requireNotReplayed requires a to be the 503 of a row that did not open.
func requireNotReplayed(t testing.TB, a answer) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, a.status, "body %s", a.body)
	require.Empty(t, a.header.Get(wire.HeaderReplayed))
	require.Equal(t, wire.ProblemType(wire.ProblemStoreUnavailable), a.problemType())
	require.NotContains(t, string(a.body), receiptBody)
}

// errorsSeen collects the OpenErrors of Config.OnErrorFunc.
type errorsSeen struct {
	n    atomic.Int64
	last atomic.Pointer[sealstore.OpenError]
}

func (e *errorsSeen) record(_ context.Context, err *sealstore.OpenError) {
	e.n.Add(1)
	e.last.Store(err)
}

var modes = []server.Mode{server.ModeTransactional, server.ModeLease}

// forEach runs f as a parallel subtest on a fresh backend of each database,
// in each middleware mode.
func forEach(t *testing.T, f func(t *testing.T, b *backend, mode server.Mode)) {
	t.Helper()
	for _, name := range backends {
		for _, mode := range modes {
			t.Run(name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				f(t, newBackend(t, name), mode)
			})
		}
	}
}

// rawBody returns the stored response_body of principal's row for the
// stored key.
func (b *backend) rawBody(t testing.TB, principal, storedKey string) []byte {
	t.Helper()
	blob, err := b.queryBytes(storetest.Context(t), "SELECT response_body FROM idempotency_keys WHERE principal = $1 AND key = $2", principal, storedKey)
	require.NoError(t, err)
	return blob
}

// update runs a statement that must change exactly one row.
func (b *backend) update(t testing.TB, query string, args ...any) {
	t.Helper()
	n, err := b.exec(storetest.Context(t), query, args...)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "rows changed by %s", query)
}
