package intenttest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// seen is one request as the server received it.
type seen struct {
	at     time.Time
	key    string
	header http.Header
	body   []byte
}

// api is an httptest server that records every request and answers with
// handle, given the request's number (1 for the first).
type api struct {
	srv *httptest.Server

	mu   sync.Mutex
	reqs []seen
	// arrived is signalled (without blocking) at every request.
	arrived chan struct{}
}

func newAPI(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request)) *api {
	t.Helper()
	a := &api{arrived: make(chan struct{}, 1024)}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		a.mu.Lock()
		a.reqs = append(a.reqs, seen{at: time.Now(), key: r.Header.Get("Idempotency-Key"), header: r.Header.Clone(), body: body})
		n := len(a.reqs)
		a.mu.Unlock()
		select {
		case a.arrived <- struct{}{}:
		default:
		}
		handle(n, w, r)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *api) url(path string) string { return a.srv.URL + path }

// requests returns a copy of what the server received so far.
func (a *api) requests() []seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seen(nil), a.reqs...)
}

func (a *api) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

// loseAnswer closes the connection without an answer: the request reached
// the server, the client never learns what happened.
func loseAnswer(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("intenttest: response writer cannot hijack")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// idemServer is the idemkit server middleware (over sqlitestore, in ModeLease)
// around effect, a handler that counts its runs per key: the real contract
// under test. lose, if set, is asked after each response whether to drop it
// (the handler ran and its response is stored, but the answer is lost).
type idemServer struct {
	*api
	mu      sync.Mutex
	effects map[string]int
	// ran is signalled (without blocking) each time the handler starts,
	// past the middleware's claim.
	ran chan struct{}
}

func newIdemServer(t *testing.T, effect http.HandlerFunc, lose func(n int) bool) *idemServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "server.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	m, err := server.New(store, &server.Config{
		PrincipalFunc: func(r *http.Request) (string, error) { return "tenant", nil },
		LeaseDuration: 30 * time.Second,
	})
	require.NoError(t, err)
	s := &idemServer{effects: map[string]int{}, ran: make(chan struct{}, 1024)}
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.effects[r.Header.Get("Idempotency-Key")]++
		s.mu.Unlock()
		select {
		case s.ran <- struct{}{}:
		default:
		}
		effect(w, r)
	}))
	s.api = newAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if lose == nil || !lose(n) {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		loseAnswer(w)
	})
	return s
}

// effectsOf returns how many times the handler ran for key.
func (s *idemServer) effectsOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}
