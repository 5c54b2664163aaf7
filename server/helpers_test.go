package server_test

// The rig every HTTP test of the package shares: the stores and modes they
// run against, an injected clock, a protected payments handler with its
// effects table (mwBundle), requests and responses, and small helpers
// (channels with a timeout, a log buffer safe for concurrent writes).

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// Test names of the two stores and two modes every HTTP test runs against.
const (
	mwSQLite   = "SQLite"
	mwPostgres = "Postgres"
)

var mwStoreKinds = []string{mwSQLite, mwPostgres, mwMySQL}

var mwModes = []server.Mode{server.ModeLease, server.ModeTransactional}

// mwClock is an injected clock: the real time plus an offset tests move.
type mwClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *mwClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *mwClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// mwStore is a fresh, migrated store plus direct access to its database, for
// effect rows and for breaking it.
type mwStore struct {
	kind  string
	store server.Store
	db    *sql.DB       // SQLite, MySQL
	path  string        // SQLite file
	pool  *pgxpool.Pool // PostgreSQL
}

// mwNewStore returns a migrated store of kind on a fresh SQLite file or
// PostgreSQL schema, with an effects table next to the idempotency table.
func mwNewStore(t testing.TB, kind string) *mwStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch kind {
	case mwSQLite:
		path := filepath.Join(t.TempDir(), "idem.db")
		db, err := sqlitestore.Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		st, err := sqlitestore.New(db, nil)
		require.NoError(t, err)
		require.NoError(t, st.Migrate(ctx))
		_, err = db.ExecContext(ctx, mwEffectsTableSQLite)
		require.NoError(t, err)
		return &mwStore{kind: kind, store: st, db: db, path: path}
	case mwPostgres:
		pool := testpg.Pool(t)
		st := mwNewPostgresStore(t, ctx, pool)
		_, err := pool.Exec(ctx, mwEffectsTablePostgres)
		require.NoError(t, err)
		return &mwStore{kind: kind, store: st, pool: pool}
	case mwMySQL:
		return mwNewMySQLStore(t, ctx)
	default:
		t.Fatalf("unknown store kind %q", kind)
		return nil
	}
}

// mwNewPostgresStore returns a migrated PostgresStore on pool.
func mwNewPostgresStore(t testing.TB, ctx context.Context, pool *pgxpool.Pool) server.Store {
	t.Helper()
	st, err := pgstore.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	require.True(t, sqlstore.CallerClock(st))
	return st
}

const (
	mwEffectsTableSQLite   = `CREATE TABLE effects (principal TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL) STRICT`
	mwEffectsTablePostgres = `CREATE TABLE effects (principal text NOT NULL, key text NOT NULL, body text NOT NULL)`
	mwInsertEffectSQLite   = "INSERT INTO effects (principal, `key`, body) VALUES (?, ?, ?)" // SQLite and MySQL
	mwInsertEffectPostgres = `INSERT INTO effects (principal, key, body) VALUES ($1, $2, $3)`
	mwCountEffects         = `SELECT count(*) FROM effects`
	mwCountRecords         = `SELECT count(*) FROM idempotency_keys`
	mwCountInProgress      = `SELECT count(*) FROM idempotency_keys WHERE state = 'in_progress'`
)

// insertEffect writes the handler's effect: through the request's
// transaction in transactional mode, on the database directly otherwise.
func (s *mwStore) insertEffect(r *http.Request, body string) error {
	ctx := r.Context()
	sc, _ := server.ScopeFromContext(ctx)
	if tx, ok := sqlitestore.Tx(ctx); ok {
		_, err := tx.ExecContext(ctx, mwInsertEffectSQLite, sc.Principal, sc.Key, body)
		return err
	}
	if tx, ok := pgstore.Tx(ctx); ok {
		_, err := tx.Exec(ctx, mwInsertEffectPostgres, sc.Principal, sc.Key, body)
		return err
	}
	if s.db != nil {
		_, err := s.db.ExecContext(ctx, mwInsertEffectSQLite, sc.Principal, sc.Key, body)
		return err
	}
	_, err := s.pool.Exec(ctx, mwInsertEffectPostgres, sc.Principal, sc.Key, body)
	return err
}

func (s *mwStore) count(t *testing.T, query string) int {
	t.Helper()
	ctx := context.Background()
	var n int
	if s.db != nil {
		require.NoError(t, s.db.QueryRowContext(ctx, query).Scan(&n))
	} else {
		require.NoError(t, s.pool.QueryRow(ctx, query).Scan(&n))
	}
	return n
}

// mwBundle is one middleware on one store behind an httptest server with a
// real http.ServeMux.
type mwBundle struct {
	*mwStore
	mode  server.Mode
	mw    *server.Middleware
	srv   *httptest.Server
	clock *mwClock

	runs    atomic.Int64 // handler runs, all routes
	started chan string  // POST /block: the principal, once in the handler
	release chan struct{}

	mu     sync.Mutex
	events []server.Event
}

// mwSetup builds a bundle; configure, if set, adjusts the config before New.
func mwSetup(t *testing.T, kind string, mode server.Mode, configure func(*server.Config)) *mwBundle {
	t.Helper()
	b := &mwBundle{
		mwStore: mwNewStore(t, kind),
		mode:    mode,
		clock:   &mwClock{},
		started: make(chan string, 64),
		release: make(chan struct{}),
	}
	cfg := &server.Config{
		PrincipalFunc: mwPrincipal,
		Mode:          mode,
		LockTimeout:   300 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		OnEventFunc: func(_ *http.Request, e server.Event) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.events = append(b.events, e)
		},
	}
	if configure != nil {
		configure(cfg)
	}
	mw, err := server.New(b.store, cfg)
	require.NoError(t, err)
	server.SetTimeNowFunc(mw, b.clock.Now)
	b.mw = mw

	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(b.payments)))
	mux.Handle("POST /refunds", mw.Wrap(http.HandlerFunc(b.payments)))
	mux.Handle("GET /payments", mw.Wrap(http.HandlerFunc(b.payments)))
	mux.Handle("PUT /items/{id}", mw.Wrap(http.HandlerFunc(b.payments)))
	mux.Handle("POST /teapot", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.runs.Add(1)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "short and stout "+strconv.FormatInt(b.runs.Load(), 10))
	})))
	mux.Handle("POST /fail", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.runs.Add(1)
		if err := b.insertEffect(r, "fail"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.Error(w, "upstream exploded "+strconv.FormatInt(n, 10), http.StatusBadGateway)
	})))
	mux.Handle("POST /panic", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.runs.Add(1)
		_ = b.insertEffect(r, "panic")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"partial":`) // never reaches the client
		panic("boom")
	})))
	mux.Handle("POST /abort", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.runs.Add(1)
		panic(http.ErrAbortHandler)
	})))
	mux.Handle("POST /big", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.runs.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"big-`+strconv.FormatInt(n, 10)+`"`)
		w.WriteHeader(http.StatusOK)
		chunk := strings.Repeat("x", 1000)
		for range 5 {
			_, _ = io.WriteString(w, chunk)
			http.NewResponseController(w).Flush() //nolint:errcheck // a no-op while buffered
		}
	})))
	mux.Handle("POST /block", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sc, _ := server.ScopeFromContext(r.Context())
		b.started <- sc.Principal
		select {
		case <-b.release:
		case <-r.Context().Done():
			return
		}
		b.payments(w, r)
	})))
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// mwPrincipal takes the principal from X-Principal.
func mwPrincipal(r *http.Request) (string, error) {
	p := r.Header.Get("X-Principal")
	if p == "" {
		return "", errors.New("no X-Principal header")
	}
	return p, nil
}

// payments is the protected handler: it writes one effect and answers 201
// with headers, some of which must never be replayed.
func (b *mwBundle) payments(w http.ResponseWriter, r *http.Request) {
	n := b.runs.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := b.insertEffect(r, string(body)); err != nil {
		http.Error(w, "effect: "+err.Error(), http.StatusInternalServerError)
		return
	}
	sc, _ := server.ScopeFromContext(r.Context())
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", fmt.Sprintf("/payments/%d", n))
	h.Set("Set-Cookie", "session=secret")
	h.Set("X-Run", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"run": n, "principal": sc.Principal, "key": sc.Key, "request": string(body)})
}

func (b *mwBundle) eventsCopy() []server.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]server.Event(nil), b.events...)
}

// mwResponse is a response read in full.
type mwResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *mwResponse) problem(t *testing.T) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "body %s", r.Body)
	require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
	var p map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &p), "body %s", r.Body)
	require.Equal(t, float64(r.Status), p["status"])
	require.NotEmpty(t, p["title"])
	return p
}

// requireProblem checks that r is a problem of the given status and slug.
func (r *mwResponse) requireProblem(t *testing.T, status int, slug string) map[string]any {
	t.Helper()
	require.Equal(t, status, r.Status, "body %s", r.Body)
	p := r.problem(t)
	require.Equal(t, wire.ProblemTypeBase+slug, p["type"])
	return p
}

// mwReq describes one request.
type mwReq struct {
	method, path string
	principal    string
	keys         []string // Idempotency-Key field lines
	body         string
	contentType  string
}

func (b *mwBundle) do(t *testing.T, q mwReq) *mwResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.send(ctx, q)
	require.NoError(t, err)
	return res
}

// send is do without a *testing.T, for goroutines.
func (b *mwBundle) send(ctx context.Context, q mwReq) (*mwResponse, error) {
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	path := q.path
	if path == "" {
		path = "/payments"
	}
	req, err := http.NewRequestWithContext(ctx, method, b.srv.URL+path, strings.NewReader(q.body))
	if err != nil {
		return nil, err
	}
	if q.principal != "" {
		req.Header.Set("X-Principal", q.principal)
	}
	for _, k := range q.keys {
		req.Header.Add(server.HeaderKey, k)
	}
	ct := q.contentType
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &mwResponse{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// forEachStore runs f as a parallel subtest per store kind.
func forEachStore(t *testing.T, f func(t *testing.T, kind string)) {
	t.Helper()
	for _, kind := range mwStoreKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

// forEachStoreAndMode runs f as a parallel subtest per store and mode.
func forEachStoreAndMode(t *testing.T, f func(t *testing.T, kind string, mode server.Mode)) {
	t.Helper()
	for _, kind := range mwStoreKinds {
		for _, mode := range mwModes {
			t.Run(kind+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				f(t, kind, mode)
			})
		}
	}
}

// mwRecv receives from ch, failing the test after 20 s instead of hanging.
func mwRecv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatal("timed out waiting on a channel")
		panic("unreachable")
	}
}

// mwSend sends on ch, failing the test after 20 s instead of hanging.
func mwSend(t *testing.T, ch chan<- struct{}) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case ch <- struct{}{}:
	case <-timer.C:
		t.Fatal("timed out sending on a channel")
	}
}

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
