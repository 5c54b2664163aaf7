package recoverer

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/mysqlstore"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// holderLease is the lease of the test's holders: short, so that a dead
// holder's lease lapses soon, and long enough for a heartbeat every
// third of it on a loaded machine.
const holderLease = 1500 * time.Millisecond

// opener opens a new store on one database, as another process would: its
// own pool, closed by the returned function (and at the end of the test).
type opener func(t *testing.T) (server.Store, func())

// backends are the stores every scenario runs on.
var backends = []struct {
	name  string
	setup func(t *testing.T) opener
}{
	{"sqlite", func(t *testing.T) opener {
		path := filepath.Join(t.TempDir(), "idem.db")
		return func(t *testing.T) (server.Store, func()) {
			ctx := context.Background()
			db, err := sqlitestore.Open(ctx, path)
			require.NoError(t, err)
			st, err := sqlitestore.New(db, nil)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(ctx))
			return st, closeOnce(t, func() { _ = db.Close() })
		}
	}},
	{"postgres", func(t *testing.T) opener {
		dsn := testpg.SchemaDSN(t)
		return func(t *testing.T) (server.Store, func()) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(dsn)
			require.NoError(t, err)
			cfg.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			st, err := pgstore.New(pool, nil)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(ctx))
			return st, closeOnce(t, pool.Close)
		}
	}},
	{"mysql", func(t *testing.T) opener {
		cfg := testmysql.DatabaseConfig(t)
		return func(t *testing.T) (server.Store, func()) {
			ctx := context.Background()
			connector, err := mysql.NewConnector(cfg)
			require.NoError(t, err)
			db := sql.OpenDB(connector)
			db.SetMaxOpenConns(4)
			st, err := mysqlstore.New(db, nil)
			require.NoError(t, err)
			require.NoError(t, st.Migrate(ctx))
			return st, closeOnce(t, func() { _ = db.Close() })
		}
	}},
}

// closeOnce returns f, made safe to call twice, and calls it when t ends.
func closeOnce(t *testing.T, f func()) func() {
	var once sync.Once
	g := func() { once.Do(f) }
	t.Cleanup(g)
	return g
}

// eachBackend runs test on every backend, in parallel.
func eachBackend(t *testing.T, test func(t *testing.T, open opener)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b.setup(t))
		})
	}
}

// downstream is a processor stub: charges keyed by the downstream key.
type downstream struct {
	mu      sync.Mutex
	charges map[string]string // downstream key -> charge id
	n       atomic.Int64      // charges made
}

func newDownstream() *downstream { return &downstream{charges: map[string]string{}} }

// charge makes the charge for key once and returns its id.
func (d *downstream) charge(key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := d.charges[key]; ok {
		return id
	}
	d.n.Add(1)
	id := "ch_" + key[len(key)-8:]
	d.charges[key] = id
	return id
}

// lookup returns the charge made with key, if any.
func (d *downstream) lookup(key string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.charges[key]
	return id, ok
}

// render is the response the handler sends for charge id, shared by the
// handler and the RecoverFunc so that a recovered response is the one the
// handler would have sent, byte for byte.
func render(id string) *server.StoredResponse {
	return &server.StoredResponse{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"charge":"` + id + `","amount":4000}` + "\n"),
	}
}

// recoverFrom is the RecoverFunc backed by d: the reconstructed response
// if the charge was made, else release.
func recoverFrom(d *downstream) RecoverFunc {
	return func(_ context.Context, c Claim) (*server.StoredResponse, error) {
		id, ok := d.lookup(c.DownstreamKey)
		if !ok {
			return nil, nil
		}
		return render(id), nil
	}
}

// app is a lease-mode API over a store: POST /charge makes a charge at its
// downstream, keyed by the request's downstream key.
type app struct {
	srv  *httptest.Server
	runs atomic.Int64 // handler runs
}

// newApp serves a lease-mode middleware over store. beforeEffect and
// afterEffect, if set, run in the handler around the charge (they may
// block: that is how the test holds a holder).
func newApp(t *testing.T, store server.Store, d *downstream, beforeEffect, afterEffect func(r *http.Request)) *app {
	t.Helper()
	a := &app{}
	mw, err := server.New(store, &server.Config{
		PrincipalFunc: func(r *http.Request) (string, error) { return "alice", nil },
		Mode:          server.ModeLease,
		LeaseDuration: holderLease,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	a.srv = httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		scope, _ := server.ScopeFromContext(r.Context())
		if beforeEffect != nil {
			beforeEffect(r)
		}
		if r.Context().Err() != nil {
			w.WriteHeader(http.StatusServiceUnavailable) // the lease is lost: no charge
			return
		}
		id := d.charge(scope.DownstreamKey())
		if afterEffect != nil {
			afterEffect(r)
		}
		resp := render(id)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	})))
	t.Cleanup(a.srv.Close)
	return a
}

// result is an HTTP answer.
type result struct {
	status int
	header http.Header
	body   []byte
}

// post sends the charge with key.
func (a *app) post(t *testing.T, key string) result {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.srv.URL+"/charge", strings.NewReader(`{"amount":4000}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := a.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return result{status: resp.StatusCode, header: resp.Header, body: b}
}

// dieHolding sends the charge with key to a holder on its own pool that
// dies at the point die: "before" or "after" the charge. The holder's
// handler blocks there while the test closes the holder's pool (its
// process is gone: no heartbeat reaches the store, no completion will);
// dieHolding returns once the holder's lease is lost. The record is left
// in progress with a lease that lapses.
func dieHolding(t *testing.T, open opener, d *downstream, key, die string) {
	t.Helper()
	store, closeStore := open(t)
	reached := make(chan struct{})
	block := func(r *http.Request) {
		close(reached)
		<-r.Context().Done() // the lease ran out: the holder is gone
	}
	var before, after func(*http.Request)
	if die == "before" {
		before = block
	} else {
		after = block
	}
	holder := newApp(t, store, d, before, after)
	done := make(chan struct{})
	go func() {
		defer close(done)
		holder.post(t, key) // whatever it answers, nothing is stored
	}()
	select {
	case <-reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the holder's handler never ran")
	}
	closeStore()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the holder's request never ended")
	}
}

// quiet is a logger that keeps what it is given, for assertions.
type quiet struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (q *quiet) Write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.buf.Write(p)
}

func (q *quiet) String() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.buf.String()
}

// events collects a recoverer's events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) count(o Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.evs {
		if ev.Outcome == o {
			n++
		}
	}
	return n
}

func (e *events) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.evs...)
}

// testConfig is a recoverer's Config for tests: a MinAge short enough for
// the test's leases, and events collected.
func testConfig(ev *events, log io.Writer) *Config {
	if log == nil {
		log = io.Discard
	}
	return &Config{
		Interval:    time.Hour, // passes are run by the test
		MinAge:      10 * time.Millisecond,
		Lease:       10 * time.Second,
		OnEventFunc: ev.add,
		Logger:      slog.New(slog.NewTextHandler(log, nil)),
	}
}

// passUntil runs passes until an event with outcome o was seen.
func passUntil(t *testing.T, r *Recoverer, ev *events, o Outcome) {
	t.Helper()
	require.Eventually(t, func() bool {
		require.NoError(t, r.Pass(t.Context()))
		return ev.count(o) > 0
	}, 60*time.Second, 50*time.Millisecond, "no %s event; events: %+v", o, ev.all())
}
