package keystatus_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/keystatus"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/storetest"
)

// backends are the real stores every test runs against: SQLite and
// PostgreSQL, bare and sealed.
var backends = []string{"SQLite", "Postgres", "SQLite+sealed", "Postgres+sealed"}

func forEachBackend(t *testing.T, fn func(t *testing.T, st server.Store)) {
	t.Helper()
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newStore(t, name))
		})
	}
}

func newStore(t *testing.T, name string) server.Store {
	t.Helper()
	ctx := storetest.Context(t)
	var st server.Store
	if strings.HasPrefix(name, "SQLite") {
		db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlitestore.New(db, nil)
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		st = s
	} else {
		s, err := pgstore.New(testpg.Pool(t), nil)
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		st = s
	}
	if strings.HasSuffix(name, "+sealed") {
		key := bytes.Repeat([]byte{0x42}, sealstore.KeySize)
		sealed, err := sealstore.New(st, &sealstore.Config{
			Keys:     map[string][]byte{sealstore.KeyID(key): key},
			HashKeys: true,
			HashKey:  bytes.Repeat([]byte{0x24}, 32),
		})
		require.NoError(t, err)
		st = sealed
	}
	return st
}

// call is one call a counting store saw.
type call struct {
	method              string
	principal, endpoint string
}

// countingStore is a thin wrapper around a REAL store that records every
// call the handler makes.
type countingStore struct {
	server.Store
	mu    sync.Mutex
	calls []call
}

func (c *countingStore) note(method string, s server.Scope) {
	c.mu.Lock()
	c.calls = append(c.calls, call{method, s.Principal, s.Endpoint})
	c.mu.Unlock()
}

func (c *countingStore) Get(ctx context.Context, s server.Scope, now time.Time) (*server.Record, error) {
	c.note("Get", s)
	return c.Store.Get(ctx, s, now)
}

func (c *countingStore) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	c.note("Claim", req.Scope)
	return c.Store.Claim(ctx, req)
}

func (c *countingStore) Complete(ctx context.Context, s server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	c.note("Complete", s)
	return c.Store.Complete(ctx, s, token, now, resp)
}

func (c *countingStore) Release(ctx context.Context, s server.Scope, token int64) error {
	c.note("Release", s)
	return c.Store.Release(ctx, s, token)
}

func (c *countingStore) ExtendLease(ctx context.Context, s server.Scope, token int64, now time.Time, lease time.Duration) error {
	c.note("ExtendLease", s)
	return c.Store.ExtendLease(ctx, s, token, now, lease)
}

func (c *countingStore) BeginTx(ctx context.Context, lockTimeout time.Duration) (server.StoreTx, error) {
	c.note("BeginTx", server.Scope{})
	return c.Store.BeginTx(ctx, lockTimeout)
}

func (c *countingStore) Sweep(ctx context.Context, now time.Time) (int, error) {
	c.note("Sweep", server.Scope{})
	return c.Store.Sweep(ctx, now)
}

// take returns the calls seen since the last take.
func (c *countingStore) take() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// bearer is the tests' PrincipalFunc: "Authorization: Bearer <principal>".
func bearer(r *http.Request) (string, error) {
	p, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || p == "" {
		return "", errors.New("no bearer token")
	}
	return p, nil
}

// claim commits an in-progress record of s (a lease-mode claim).
func claim(t *testing.T, st server.Store, s server.Scope, now time.Time) int64 {
	t.Helper()
	res, err := st.Claim(storetest.Context(t), server.ClaimRequest{
		Scope: s, Fingerprint: bytes.Repeat([]byte{1}, 32), FingerprintVersion: 2,
		Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute),
	})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	return res.Token
}

// complete claims s and stores resp.
func complete(t *testing.T, st server.Store, s server.Scope, now time.Time, resp *server.StoredResponse) {
	t.Helper()
	token := claim(t, st, s, now)
	require.NoError(t, st.Complete(storetest.Context(t), s, token, now, resp))
}

// lookup sends GET target with the principal (none if empty).
func lookup(t *testing.T, h http.Handler, principal, target string) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /v1/idempotency-keys/{key}", h)
	r := httptest.NewRequestWithContext(storetest.Context(t), http.MethodGet, target, nil)
	if principal != "" {
		r.Header.Set("Authorization", "Bearer "+principal)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func newHandler(t *testing.T, st server.Store, cfg *keystatus.Config) *keystatus.Handler {
	t.Helper()
	if cfg == nil {
		cfg = &keystatus.Config{}
	}
	if cfg.PrincipalFunc == nil {
		cfg.PrincipalFunc = bearer
	}
	h, err := keystatus.New(st, cfg)
	require.NoError(t, err)
	return h
}
