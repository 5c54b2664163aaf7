package server_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// The kill tests run the middleware in a child process (this test binary,
// re-executed with -test.run=^TestKillChild$ and IDEMKIT_KILL_CHILD set),
// SIGKILL it inside a handler, and retry against a fresh child on the same
// SQLite file or PostgreSQL schema.

const mwChildEnv = "IDEMKIT_KILL_CHILD"

// mwChildSpec configures a child server.
type mwChildSpec struct {
	Store      string        `json:"store"`  // mwSQLite, mwPostgres or mwMySQL
	Target     string        `json:"target"` // SQLite path or PostgreSQL DSN
	Mode       server.Mode   `json:"mode"`
	Lease      time.Duration `json:"lease"`
	Block      bool          `json:"block"`      // the handler blocks forever once entered
	Generation int           `json:"generation"` // written into the runs table
}

const (
	mwRunsTableSQLite   = `CREATE TABLE IF NOT EXISTS runs (generation INTEGER NOT NULL) STRICT`
	mwRunsTablePostgres = `CREATE TABLE IF NOT EXISTS runs (generation int NOT NULL)`
	mwEffectsIfMissing  = `CREATE TABLE IF NOT EXISTS effects (principal TEXT NOT NULL, key TEXT NOT NULL, body TEXT NOT NULL)`
)

// TestKillChild is the child server of the kill tests; on its own it skips.
func TestKillChild(t *testing.T) {
	t.Parallel()
	raw := os.Getenv(mwChildEnv)
	if raw == "" {
		t.Skip("the child server of the kill tests; started by TestKill_*")
	}
	var spec mwChildSpec
	require.NoError(t, json.Unmarshal([]byte(raw), &spec))
	if err := mwRunChild(spec); err != nil {
		fmt.Printf("CHILD_ERROR %v\n", err)
		t.Fatal(err)
	}
}

func mwRunChild(spec mwChildSpec) error {
	ctx := context.Background()
	var (
		store  server.Store
		insert func(r *http.Request, gen int, body string) error
	)
	switch spec.Store {
	case mwSQLite:
		db, err := sqlitestore.Open(ctx, spec.Target)
		if err != nil {
			return err
		}
		st, err := sqlitestore.New(db, nil)
		if err != nil {
			return err
		}
		if err := st.Migrate(ctx); err != nil {
			return err
		}
		for _, q := range []string{mwRunsTableSQLite, mwEffectsIfMissing} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		store = st
		insert = func(r *http.Request, gen int, body string) error {
			sc, _ := server.ScopeFromContext(r.Context())
			if tx, ok := sqlitestore.Tx(r.Context()); ok {
				// The transaction holds SQLite's only write lock: the
				// effect is the run.
				_, err := tx.ExecContext(r.Context(), mwInsertEffectSQLite, sc.Principal, sc.Key, body)
				return err
			}
			if _, err := db.ExecContext(r.Context(), `INSERT INTO runs (generation) VALUES (?)`, gen); err != nil {
				return err
			}
			_, err := db.ExecContext(r.Context(), mwInsertEffectSQLite, sc.Principal, sc.Key, body)
			return err
		}
	case mwPostgres:
		pool, err := pgxpool.New(ctx, spec.Target)
		if err != nil {
			return err
		}
		st, err := pgstore.New(pool, nil)
		if err != nil {
			return err
		}
		if err := st.Migrate(ctx); err != nil {
			return err
		}
		for _, q := range []string{mwRunsTablePostgres, mwEffectsIfMissing} {
			if _, err := pool.Exec(ctx, q); err != nil {
				return err
			}
		}
		store = st
		insert = func(r *http.Request, gen int, body string) error {
			sc, _ := server.ScopeFromContext(r.Context())
			if tx, ok := pgstore.Tx(r.Context()); ok {
				_, err := tx.Exec(r.Context(), mwInsertEffectPostgres, sc.Principal, sc.Key, body)
				return err
			}
			if _, err := pool.Exec(r.Context(), `INSERT INTO runs (generation) VALUES ($1)`, gen); err != nil {
				return err
			}
			_, err := pool.Exec(r.Context(), mwInsertEffectPostgres, sc.Principal, sc.Key, body)
			return err
		}
	case mwMySQL:
		var err error
		if store, insert, err = mwMySQLChild(ctx, spec.Target); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown store %q", spec.Store)
	}

	m, err := server.New(store, &server.Config{PrincipalFunc: mwPrincipal, Mode: spec.Mode, LeaseDuration: spec.Lease})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := insert(r, spec.Generation, string(body)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if spec.Block {
			fmt.Println("IN_HANDLER")
			select {} // until SIGKILL
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"generation":%d}`, spec.Generation)
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("LISTEN %s\n", ln.Addr())
	go func() {
		// The parent's end of stdin closes when it dies: do not outlive it.
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	return http.Serve(ln, mux)
}

// mwChild is a running child server.
type mwChild struct {
	cmd   *exec.Cmd
	addr  string
	lines chan string
}

func mwStartChild(t *testing.T, spec mwChildSpec) *mwChild {
	t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), mwChildEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	_, err = cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var waited atomic.Bool
	t.Cleanup(func() {
		if !waited.Load() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	c := &mwChild{cmd: cmd, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	for {
		line := c.waitLine(t)
		if addr, ok := strings.CutPrefix(line, "LISTEN "); ok {
			c.addr = addr
			return c
		}
		require.False(t, strings.HasPrefix(line, "CHILD_ERROR"), "child: %s", line)
	}
}

// waitLine returns the next line the child printed.
func (c *mwChild) waitLine(t *testing.T) string {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case line, ok := <-c.lines:
		require.True(t, ok, "child exited")
		return line
	case <-timer.C:
		t.Fatal("timed out waiting for the child")
		return ""
	}
}

func (c *mwChild) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(os.Kill))
	err := c.cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the child must die of the signal")
}

func (c *mwChild) post(ctx context.Context, key string) (*mwResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.addr+"/payments", strings.NewReader(mwBody))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Principal", "alice")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(server.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return &mwResponse{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

// mwKillTarget is the database both children share, and the parent's own
// view of it.
type mwKillTarget struct {
	kind, target string
	count        func(t *testing.T, query string) int
}

func mwNewKillTarget(t *testing.T, kind string) *mwKillTarget {
	t.Helper()
	switch kind {
	case mwSQLite:
		path := filepath.Join(t.TempDir(), "idem.db")
		return &mwKillTarget{kind: kind, target: path, count: func(t *testing.T, query string) int {
			t.Helper()
			db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
			require.NoError(t, err)
			defer db.Close()
			var n int
			require.NoError(t, db.QueryRow(query).Scan(&n))
			return n
		}}
	case mwMySQL:
		return mwNewMySQLKillTarget(t)
	default:
		dsn := testpg.SchemaDSN(t)
		return &mwKillTarget{kind: kind, target: dsn, count: func(t *testing.T, query string) int {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			pool, err := pgxpool.New(ctx, dsn)
			require.NoError(t, err)
			defer pool.Close()
			var n int
			require.NoError(t, pool.QueryRow(ctx, query).Scan(&n))
			return n
		}}
	}
}

// mwKillInHandler starts a blocking child, sends a request, waits until the
// handler runs and kills the child.
func mwKillInHandler(t *testing.T, ctx context.Context, tg *mwKillTarget, mode server.Mode, lease time.Duration) time.Time {
	t.Helper()
	child := mwStartChild(t, mwChildSpec{Store: tg.kind, Target: tg.target, Mode: mode, Lease: lease, Block: true, Generation: 1})
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := child.post(reqCtx, "kill-me")
		errc <- err
	}()
	for line := child.waitLine(t); line != "IN_HANDLER"; line = child.waitLine(t) {
	}
	claimedBefore := time.Now()
	child.kill(t)
	require.Error(t, mwRecv(t, errc), "the killed child never answers")
	return claimedBefore
}

func TestKill_Transactional(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		tg := mwNewKillTarget(t, kind)
		mwKillInHandler(t, ctx, tg, server.ModeTransactional, 0)

		// The crash rolled everything back: no claim, no effect (the
		// handler had written its effect in the transaction before it
		// signalled).
		require.Equal(t, 0, tg.count(t, mwCountRecords), "no claim remains")
		require.Equal(t, 0, tg.count(t, mwCountEffects), "no effect remains")

		// The retry on a new process succeeds, exactly once.
		child := mwStartChild(t, mwChildSpec{Store: kind, Target: tg.target, Mode: server.ModeTransactional, Generation: 2})
		res := mwPostUntil(t, ctx, child, "kill-me", func(r *mwResponse) bool { return r.Status != http.StatusConflict })
		require.Equal(t, http.StatusCreated, res.Status, "body %s", res.Body)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.JSONEq(t, `{"generation":2}`, string(res.Body))
		again, err := child.post(ctx, "kill-me")
		require.NoError(t, err)
		require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
		require.Equal(t, 1, tg.count(t, mwCountEffects), "exactly one effect")
		require.Equal(t, 1, tg.count(t, mwCountRecords))
	})
}

func TestKill_Lease(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		const lease = 3 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		tg := mwNewKillTarget(t, kind)
		claimedBefore := mwKillInHandler(t, ctx, tg, server.ModeLease, lease)

		// The claim was committed before the handler ran: it survives.
		require.Equal(t, 1, tg.count(t, mwCountInProgress), "an in_progress row remains")
		require.Equal(t, 1, tg.count(t, "SELECT count(*) FROM runs WHERE generation = 1"), "the killed handler ran")

		child := mwStartChild(t, mwChildSpec{Store: kind, Target: tg.target, Mode: server.ModeLease, Lease: lease, Generation: 2})
		res, err := child.post(ctx, "kill-me")
		require.NoError(t, err)
		if time.Since(claimedBefore) < lease-500*time.Millisecond {
			require.Equal(t, http.StatusConflict, res.Status, "a retry before the lease ends is a 409: %s", res.Body)
			retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.True(t, retry >= 1 && retry <= 3, "Retry-After %d", retry)
		} else {
			t.Logf("the retry came %v after the claim; not checking the 409", time.Since(claimedBefore))
		}

		// After the lease it takes the claim over and runs exactly once.
		res = mwPostUntil(t, ctx, child, "kill-me", func(r *mwResponse) bool { return r.Status != http.StatusConflict })
		require.Equal(t, http.StatusCreated, res.Status, "body %s", res.Body)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.JSONEq(t, `{"generation":2}`, string(res.Body))
		for range 2 {
			again, err := child.post(ctx, "kill-me")
			require.NoError(t, err)
			require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
		}
		require.Equal(t, 1, tg.count(t, "SELECT count(*) FROM runs WHERE generation = 2"), "the takeover ran exactly once")
		require.Equal(t, 0, tg.count(t, mwCountInProgress))
		require.Equal(t, 1, tg.count(t, mwCountRecords))
	})
}

// mwPostUntil posts until done reports true, polling with a deadline.
func mwPostUntil(t *testing.T, ctx context.Context, c *mwChild, key string, done func(*mwResponse) bool) *mwResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := c.post(ctx, key)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			require.NoError(t, err)
		}
		if res != nil && done(res) {
			return res
		}
		require.True(t, time.Now().Before(deadline), "gave up polling; last status %v", res)
		<-tick.C
	}
}
