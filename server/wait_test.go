package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// waitStoreKinds are the stores the waiting tests run on: SQLite and
// PostgreSQL (the two), and MySQL where the matrix has it.
var waitStoreKinds = []string{mwSQLite, mwPostgres, mwMySQL}

// forEachWaitStoreAndMode runs f per store of waitStoreKinds and mode.
func forEachWaitStoreAndMode(t *testing.T, kinds []string, f func(t *testing.T, kind string, mode server.Mode)) {
	t.Helper()
	for _, kind := range kinds {
		for _, mode := range mwModes {
			t.Run(kind+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				f(t, kind, mode)
			})
		}
	}
}

// sendAsync sends q in a goroutine; the response (or nil, with the error
// reported) arrives on the channel.
func (b *mwBundle) sendAsync(t *testing.T, ctx context.Context, q mwReq) <-chan *mwResponse {
	t.Helper()
	ch := make(chan *mwResponse, 1)
	go func() {
		res, err := b.send(ctx, q)
		if err != nil && ctx.Err() == nil {
			t.Errorf("%s %s: %v", q.principal, q.keys, err)
		}
		ch <- res
	}()
	return ch
}

// requireWaiting waits until n requests of b's middleware are waiting.
func (b *mwBundle) requireWaiting(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.mw.Waiting() == n }, 20*time.Second, 5*time.Millisecond,
		"want %d waiting requests, have %d", n, b.mw.Waiting())
}

// A duplicate that arrives while the original runs waits for it and gets
// the original's response, byte for byte, instead of 409; the handler runs
// once.
func TestWait_DuplicateGetsTheOriginalsResponseWhenItFinishesInTime(t *testing.T) {
	t.Parallel()
	forEachWaitStoreAndMode(t, waitStoreKinds, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.LeaseDuration = 20 * time.Second
			c.WaitInFlight = 30 * time.Second
		})
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		q := mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody}
		first := b.sendAsync(t, ctx, q)
		require.Equal(t, "alice", mwRecv(t, b.started))

		dup := b.sendAsync(t, ctx, q)
		b.requireWaiting(t, 1)
		close(b.release) // the original finishes

		orig := mwRecv(t, first)
		require.NotNil(t, orig)
		require.Equal(t, http.StatusCreated, orig.Status, "body %s", orig.Body)
		got := mwRecv(t, dup)
		require.NotNil(t, got)
		require.Equal(t, http.StatusCreated, got.Status, "the duplicate waited for the original instead of a 409: body %s", got.Body)
		require.Equal(t, "true", got.Header.Get(wire.HeaderReplayed))
		require.Equal(t, string(orig.Body), string(got.Body))
		require.Equal(t, orig.Header.Get("Location"), got.Header.Get("Location"))
		require.EqualValues(t, 1, b.runs.Load(), "the handler ran once")
		require.Equal(t, 1, b.count(t, mwCountEffects))
		require.Equal(t, 0, b.mw.Waiting())

		var replayed server.Event
		require.Eventually(t, func() bool {
			for _, e := range b.eventsCopy() {
				if e.Outcome == server.OutcomeReplayed {
					replayed = e
					return true
				}
			}
			return false
		}, 10*time.Second, 5*time.Millisecond)
		require.Positive(t, replayed.Waited, "the replay's event says it waited")
		require.False(t, replayed.WaitRefused)
	})
}

// Past Config.WaitInFlight the duplicate gets 409 in-flight + Retry-After,
// as without waiting, and the original still completes.
func TestWait_PastTheLimitAnswers409WithRetryAfter(t *testing.T) {
	t.Parallel()
	forEachWaitStoreAndMode(t, waitStoreKinds, func(t *testing.T, kind string, mode server.Mode) {
		const limit = 300 * time.Millisecond
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.LeaseDuration = 20 * time.Second
			c.WaitInFlight = limit
		})
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		q := mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody}
		first := b.sendAsync(t, ctx, q)
		require.Equal(t, "alice", mwRecv(t, b.started))

		res := b.do(t, q) // the original is held until release: this one must give up
		res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
		retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, retry, 1)
		require.Equal(t, 0, b.mw.Waiting())

		close(b.release)
		orig := mwRecv(t, first)
		require.NotNil(t, orig)
		require.Equal(t, http.StatusCreated, orig.Status)
		require.EqualValues(t, 1, b.runs.Load())

		var conflict server.Event
		for _, e := range b.eventsCopy() {
			if e.Outcome == server.OutcomeConflict {
				conflict = e
			}
		}
		require.Equal(t, http.StatusConflict, conflict.Status)
		require.GreaterOrEqual(t, conflict.Waited, limit, "it waited the whole limit")
	})
}

// The bounds on waiting requests hold: past MaxWaitingPerPrincipal or
// MaxWaiting a duplicate gets 409 at once (while every original is still
// held), and the waiters within the bounds get their replays.
func TestWait_BoundsAnswer409AtOnce(t *testing.T) {
	t.Parallel()
	forEachWaitStoreAndMode(t, []string{mwSQLite, mwPostgres}, func(t *testing.T, kind string, mode server.Mode) {
		if kind == mwSQLite && mode == server.ModeTransactional {
			t.Skip("SQLite's single writer holds one transactional original at a time; this test needs three")
		}
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.LeaseDuration = 20 * time.Second
			c.WaitInFlight = 30 * time.Second
			c.MaxWaiting = 2
			c.MaxWaitingPerPrincipal = 1
		})
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		req := func(p string) mwReq {
			return mwReq{path: "/block", principal: p, keys: []string{"k-" + p}, body: mwBody}
		}
		originals := map[string]<-chan *mwResponse{}
		for _, p := range []string{"alice", "bob", "carol"} {
			originals[p] = b.sendAsync(t, ctx, req(p))
			require.Equal(t, p, mwRecv(t, b.started))
		}
		aliceWaits := b.sendAsync(t, ctx, req("alice"))
		b.requireWaiting(t, 1)

		// alice holds her one waiting place: her next duplicate is refused.
		res := b.do(t, req("alice"))
		res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
		require.NotEmpty(t, res.Header.Get("Retry-After"))

		bobWaits := b.sendAsync(t, ctx, req("bob"))
		b.requireWaiting(t, 2)
		// Two wait in all: carol, with no waiter of her own, is refused too.
		res = b.do(t, req("carol"))
		res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
		require.Equal(t, 2, b.mw.Waiting(), "the refused ones never waited")

		refused := 0
		for _, e := range b.eventsCopy() {
			if e.WaitRefused {
				refused++
				require.Equal(t, server.OutcomeConflict, e.Outcome)
				require.Zero(t, e.Waited)
			}
		}
		require.Equal(t, 2, refused)

		close(b.release)
		for _, p := range []string{"alice", "bob", "carol"} {
			require.Equal(t, http.StatusCreated, mwRecv(t, originals[p]).Status)
		}
		for _, ch := range []<-chan *mwResponse{aliceWaits, bobWaits} {
			got := mwRecv(t, ch)
			require.NotNil(t, got)
			require.Equal(t, http.StatusCreated, got.Status, "body %s", got.Body)
			require.Equal(t, "true", got.Header.Get(wire.HeaderReplayed))
		}
		require.EqualValues(t, 3, b.runs.Load())
		require.Equal(t, 0, b.mw.Waiting())
	})
}

// A client that goes away while its request waits ends the wait: its place
// is given back (the gauge returns to 0) and nothing leaks (TestMain's
// goleak check); the original is unaffected.
func TestWait_ClientDisconnectEndsTheWait(t *testing.T) {
	t.Parallel()
	forEachWaitStoreAndMode(t, []string{mwSQLite, mwPostgres}, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.LeaseDuration = 20 * time.Second
			c.WaitInFlight = 30 * time.Second
		})
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		q := mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody}
		first := b.sendAsync(t, ctx, q)
		require.Equal(t, "alice", mwRecv(t, b.started))

		dupCtx, hangUp := context.WithCancel(ctx)
		dup := b.sendAsync(t, dupCtx, q)
		b.requireWaiting(t, 1)
		hangUp()
		require.Nil(t, mwRecv(t, dup))
		b.requireWaiting(t, 0)
		require.Eventually(t, func() bool {
			for _, e := range b.eventsCopy() {
				if e.Outcome == server.OutcomeCanceled {
					return e.Waited > 0
				}
			}
			return false
		}, 10*time.Second, 5*time.Millisecond, "the gone waiter's event says canceled")

		close(b.release)
		require.Equal(t, http.StatusCreated, mwRecv(t, first).Status)
		require.EqualValues(t, 1, b.runs.Load())
	})
}

// If the original releases its claim (it answered 5xx: nothing happened),
// the waiting duplicate claims the key itself and runs the handler, as a
// retry after a 409 would.
func TestWait_ReleasedOriginalLetsTheWaiterRun(t *testing.T) {
	t.Parallel()
	forEachWaitStoreAndMode(t, []string{mwSQLite, mwPostgres}, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.LeaseDuration = 20 * time.Second
			c.WaitInFlight = 30 * time.Second
		})
		var runs atomic.Int64
		started, release := make(chan struct{}, 4), make(chan struct{})
		h := b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if n == 1 {
				started <- struct{}{}
				<-release
				http.Error(w, "upstream down", http.StatusBadGateway)
				return
			}
			if err := b.insertEffect(r, "second"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, "run %d", n)
		}))
		srv := httptest.NewServer(h)
		defer srv.Close()
		post := func(ctx context.Context) (*mwResponse, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/pay", nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("X-Principal", "alice")
			req.Header.Set(server.HeaderKey, "k")
			resp, err := srv.Client().Do(req)
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return &mwResponse{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var first, dup *mwResponse
		var firstErr, dupErr error
		wg.Add(1)
		go func() { defer wg.Done(); first, firstErr = post(ctx) }()
		mwRecv(t, started)
		wg.Add(1)
		go func() { defer wg.Done(); dup, dupErr = post(ctx) }()
		b.requireWaiting(t, 1)
		close(release)
		wg.Wait()
		require.NoError(t, firstErr)
		require.NoError(t, dupErr)
		require.Equal(t, http.StatusBadGateway, first.Status)
		require.Equal(t, http.StatusCreated, dup.Status, "body %s", dup.Body)
		require.Equal(t, "run 2", string(dup.Body))
		require.Empty(t, dup.Header.Get(wire.HeaderReplayed))
		require.EqualValues(t, 2, runs.Load())
		require.Equal(t, 1, b.count(t, mwCountEffects))
	})
}

// pollingOnly is a real store seen without its optional interfaces
// (ChangeSubscriber among them): the middleware polls it.
type pollingOnly struct{ server.Store }

// In transactional mode a waiting duplicate holds no connection (and so no
// transaction) while it waits: only the original's is in use. (The store
// is polled: a ChangeSubscriber's one listening connection is the
// store's, shared by every waiter, and not counted here.)
func TestWait_TransactionalWaiterHoldsNoConnection(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{mwSQLite, mwPostgres} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			st := mwNewStore(t, kind)
			mw, err := server.New(pollingOnly{st.store}, &server.Config{
				PrincipalFunc: mwPrincipal,
				Mode:          server.ModeTransactional,
				LockTimeout:   300 * time.Millisecond,
				WaitInFlight:  30 * time.Second,
				Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
			})
			require.NoError(t, err)
			started, release := make(chan struct{}, 1), make(chan struct{})
			srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case started <- struct{}{}:
					<-release
				default:
				}
				if err := st.insertEffect(r, "paid"); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "paid once")
			})))
			defer srv.Close()
			inUse := func() int {
				if st.pool != nil {
					return int(st.pool.Stat().AcquiredConns())
				}
				return st.db.Stats().InUse
			}
			post := func() <-chan *mwResponse {
				ch := make(chan *mwResponse, 1)
				go func() {
					res, err := postTo(srv, "alice", "k")
					if err != nil {
						t.Errorf("post: %v", err)
					}
					ch <- res
				}()
				return ch
			}
			first := post()
			mwRecv(t, started)
			require.Equal(t, 1, inUse(), "the original's transaction")

			dup := post()
			require.Eventually(t, func() bool { return mw.Waiting() == 1 }, 20*time.Second, time.Millisecond)
			// Between its polls the waiter holds nothing; a waiter that kept
			// its claim's transaction open would hold a second connection
			// for as long as it waits.
			require.Eventually(t, func() bool { return inUse() == 1 && mw.Waiting() == 1 }, 20*time.Second, time.Millisecond)

			close(release)
			require.Equal(t, http.StatusCreated, mwRecv(t, first).Status)
			got := mwRecv(t, dup)
			require.Equal(t, http.StatusCreated, got.Status, "body %s", got.Body)
			require.Equal(t, "true", got.Header.Get(wire.HeaderReplayed))
			require.Equal(t, "paid once", string(got.Body))
			require.Equal(t, 1, st.count(t, mwCountEffects))
		})
	}
}

// subscribingStore is a real store that also implements
// server.ChangeSubscriber: it wakes subscribers when a completion is
// stored, as pgstore's LISTEN/NOTIFY does.
type subscribingStore struct {
	server.Store
	mu         sync.Mutex
	subs       map[server.Scope][]chan struct{}
	subscribed atomic.Int64
}

func (s *subscribingStore) SubscribeChange(_ context.Context, sc server.Scope) (<-chan struct{}, func(), error) {
	s.subscribed.Add(1)
	ch := make(chan struct{})
	s.mu.Lock()
	if s.subs == nil {
		s.subs = make(map[server.Scope][]chan struct{})
	}
	s.subs[sc] = append(s.subs[sc], ch)
	s.mu.Unlock()
	stop := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, c := range s.subs[sc] {
			if c == ch {
				s.subs[sc] = append(s.subs[sc][:i], s.subs[sc][i+1:]...)
				break
			}
		}
	}
	return ch, stop, nil
}

func (s *subscribingStore) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	err := s.Store.Complete(ctx, sc, token, now, resp)
	s.mu.Lock()
	for _, c := range s.subs[sc] {
		close(c)
	}
	delete(s.subs, sc)
	s.mu.Unlock()
	return err
}

// A store that implements ChangeSubscriber is subscribed to while a
// duplicate waits, and its notification delivers the replay.
func TestWait_SubscribesWhenTheStoreCanNotify(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		if kind == mwMySQL {
			t.Skip("SQLite and PostgreSQL suffice: the subscription is the store's, not the database's")
		}
		st := mwNewStore(t, kind)
		sub := &subscribingStore{Store: st.store}
		mw, err := server.New(sub, &server.Config{
			PrincipalFunc: mwPrincipal,
			WaitInFlight:  30 * time.Second,
			Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		})
		require.NoError(t, err)
		started, release := make(chan struct{}, 1), make(chan struct{})
		srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			select {
			case started <- struct{}{}:
				<-release
			default:
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "paid")
		})))
		defer srv.Close()
		post := func() <-chan int {
			ch := make(chan int, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
				req.Header.Set("X-Principal", "alice")
				req.Header.Set(server.HeaderKey, "k")
				resp, err := srv.Client().Do(req)
				if err != nil {
					ch <- 0
					return
				}
				_ = resp.Body.Close()
				ch <- resp.StatusCode
			}()
			return ch
		}
		first := post()
		mwRecv(t, started)
		dup := post()
		require.Eventually(t, func() bool { return mw.Waiting() == 1 && sub.subscribed.Load() > 0 }, 20*time.Second, time.Millisecond)
		close(release)
		require.Equal(t, http.StatusCreated, mwRecv(t, first))
		require.Equal(t, http.StatusCreated, mwRecv(t, dup))
	})
}

func TestNew_ValidateWaiting(t *testing.T) {
	t.Parallel()
	st := mwNewStore(t, mwSQLite).store
	_, err := server.New(st, &server.Config{PrincipalFunc: mwPrincipal, WaitInFlight: -time.Second})
	require.ErrorContains(t, err, "Config.WaitInFlight")
	_, err = server.New(st, &server.Config{PrincipalFunc: mwPrincipal, MaxWaiting: -1})
	require.ErrorContains(t, err, "Config.MaxWaiting")
	m, err := server.New(st, &server.Config{PrincipalFunc: mwPrincipal})
	require.NoError(t, err)
	require.Zero(t, server.ConfigOf(m).WaitInFlight, "waiting is opt-in")
	require.Equal(t, 256, server.ConfigOf(m).MaxWaiting)
	require.Equal(t, 8, server.ConfigOf(m).MaxWaitingPerPrincipal)
}

// postTo POSTs mwBody to srv as principal with key, for goroutines.
func postTo(srv *httptest.Server, principal, key string) (*mwResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/pay", strings.NewReader(mwBody))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Principal", principal)
	req.Header.Set(server.HeaderKey, key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return &mwResponse{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

// legacyWaitRig is an upgrade in progress: oldSrv runs the former
// endpoint default (records under "METHOD pattern"), newSrv the current one
// with LegacyEndpointFunc and WaitInFlight, both on one store. The first
// request to run the handler blocks until release; it answers status.
type legacyWaitRig struct {
	oldSrv, newSrv *httptest.Server
	newMW          *server.Middleware
	runs           atomic.Int64
	started        chan struct{}
	release        func()

	mu     sync.Mutex
	events []server.Event // newMW's
}

func newLegacyWaitRig(t *testing.T, kind string, firstStatus int) *legacyWaitRig {
	t.Helper()
	st := mwNewStore(t, kind)
	rig := &legacyWaitRig{started: make(chan struct{}, 1)}
	released := make(chan struct{})
	var once sync.Once
	rig.release = func() { once.Do(func() { close(released) }) }
	charge := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := rig.runs.Add(1)
		status := http.StatusCreated
		if n == 1 {
			rig.started <- struct{}{}
			<-released
			status = firstStatus
		}
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, "charge %d", n)
	})
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	oldMW, err := server.New(st.store, &server.Config{PrincipalFunc: mwPrincipal, Mode: server.ModeLease,
		LeaseDuration: 20 * time.Second, EndpointFunc: legacyPatternEndpoint, Logger: logger})
	require.NoError(t, err)
	rig.newMW, err = server.New(st.store, &server.Config{PrincipalFunc: mwPrincipal, Mode: server.ModeLease,
		LeaseDuration: 20 * time.Second, WaitInFlight: 30 * time.Second, Logger: logger,
		LegacyEndpointFunc: server.LegacyPatternEndpoints("POST /pay"),
		OnEventFunc: func(_ *http.Request, e server.Event) {
			rig.mu.Lock()
			defer rig.mu.Unlock()
			rig.events = append(rig.events, e)
		}})
	require.NoError(t, err)
	serve := func(mw *server.Middleware) *httptest.Server {
		mux := http.NewServeMux()
		mux.Handle("POST /pay", mw.Wrap(charge))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}
	rig.oldSrv, rig.newSrv = serve(oldMW), serve(rig.newMW)
	t.Cleanup(rig.release) // before the servers close, if the test fails early
	return rig
}

// post sends alice's request with key k to srv in a goroutine.
func (rig *legacyWaitRig) post(t *testing.T, srv *httptest.Server) <-chan *mwResponse {
	ch := make(chan *mwResponse, 1)
	go func() {
		res, err := postTo(srv, "alice", "k")
		if err != nil {
			t.Errorf("post: %v", err)
		}
		ch <- res
	}()
	return ch
}

// startDuplicate sends the original to the old server, holds it in its
// handler, and sends its duplicate to the new one, which waits.
func (rig *legacyWaitRig) startDuplicate(t *testing.T) (first, dup <-chan *mwResponse) {
	t.Helper()
	first = rig.post(t, rig.oldSrv)
	mwRecv(t, rig.started)
	dup = rig.post(t, rig.newSrv)
	require.Eventually(t, func() bool { return rig.newMW.Waiting() == 1 }, 20*time.Second, time.Millisecond,
		"the duplicate waits for the legacy-scope original instead of a 409")
	return first, dup
}

// A duplicate whose original is in flight under the legacy endpoint scope
// (Config.LegacyEndpointFunc: the original was sent to a replica still
// running the former default, during a rolling upgrade) waits for it and
// replays its response, as a duplicate under the current scope does,
// instead of 409 at once; the handler runs once. Lease mode only: in
// transactional mode the original's record is not visible before it
// commits, so the legacy lookup cannot see it in flight at all.
func TestWait_DuplicateOfALegacyScopeOriginalWaits(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		if kind == mwMySQL {
			t.Skip("SQLite and PostgreSQL suffice: the legacy lookup is the middleware's")
		}
		rig := newLegacyWaitRig(t, kind, http.StatusCreated)
		first, dup := rig.startDuplicate(t)
		rig.release()

		orig := mwRecv(t, first)
		require.NotNil(t, orig)
		require.Equal(t, http.StatusCreated, orig.Status, "body %s", orig.Body)
		got := mwRecv(t, dup)
		require.NotNil(t, got)
		require.Equal(t, http.StatusCreated, got.Status, "body %s", got.Body)
		require.Equal(t, "true", got.Header.Get(wire.HeaderReplayed))
		require.Equal(t, "charge 1", string(got.Body))
		require.EqualValues(t, 1, rig.runs.Load(), "the handler ran once")
		require.Equal(t, 0, rig.newMW.Waiting())
		rig.mu.Lock()
		defer rig.mu.Unlock()
		require.Len(t, rig.events, 1)
		require.Equal(t, server.OutcomeReplayed, rig.events[0].Outcome)
		require.Positive(t, rig.events[0].Waited, "the replay's event says it waited")
	})
}

// If the legacy-scope original releases its claim (it answered 5xx:
// nothing happened), the waiting duplicate goes on under its own scope
// and runs the handler, as a retry after the release would.
func TestWait_ReleasedLegacyScopeOriginalLetsTheWaiterRun(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		if kind == mwMySQL {
			t.Skip("SQLite and PostgreSQL suffice: the legacy lookup is the middleware's")
		}
		rig := newLegacyWaitRig(t, kind, http.StatusBadGateway)
		first, dup := rig.startDuplicate(t)
		rig.release()

		require.Equal(t, http.StatusBadGateway, mwRecv(t, first).Status)
		got := mwRecv(t, dup)
		require.NotNil(t, got)
		require.Equal(t, http.StatusCreated, got.Status, "body %s", got.Body)
		require.Empty(t, got.Header.Get(wire.HeaderReplayed))
		require.Equal(t, "charge 2", string(got.Body))
		require.EqualValues(t, 2, rig.runs.Load())
		require.Equal(t, 0, rig.newMW.Waiting())
		rig.mu.Lock()
		defer rig.mu.Unlock()
		require.Len(t, rig.events, 1)
		require.Equal(t, server.OutcomeExecuted, rig.events[0].Outcome)
		require.Positive(t, rig.events[0].Waited)
	})
}
