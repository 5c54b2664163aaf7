package server_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
	"github.com/idemkit/idemkit/server/mysqlstore"
)

// The MySQL/MariaDB store of the HTTP tests. Its *sql.DB is mwStore.db, as
// SQLite's is: the effects statements are written to run on both.
const mwMySQL = "MySQL"

const (
	mwEffectsTableMySQL = "CREATE TABLE IF NOT EXISTS effects (principal VARCHAR(512) NOT NULL, `key` VARCHAR(255) NOT NULL, body TEXT NOT NULL) ENGINE = InnoDB"
	mwRunsTableMySQL    = `CREATE TABLE IF NOT EXISTS runs (generation INT NOT NULL) ENGINE = InnoDB`
)

// mwNewMySQLStore returns a migrated MySQL store, deciding by the
// middleware's clock, on a fresh database with an effects table.
func mwNewMySQLStore(t testing.TB, ctx context.Context) *mwStore {
	t.Helper()
	db := testmysql.DB(t)
	st, err := mysqlstore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	require.True(t, sqlstore.CallerClock(st))
	_, err = db.ExecContext(ctx, mwEffectsTableMySQL)
	require.NoError(t, err)
	return &mwStore{kind: mwMySQL, store: st, db: db}
}

// mwMySQLChild is the store and effect of a kill-test child on the MySQL
// database of dsn.
func mwMySQLChild(ctx context.Context, dsn string) (server.Store, func(r *http.Request, gen int, body string) error, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(testmysql.MaxOpenConns)
	st, err := mysqlstore.New(db, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	for _, q := range []string{mwRunsTableMySQL, mwEffectsTableMySQL} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, nil, err
		}
	}
	insert := func(r *http.Request, gen int, body string) error {
		sc, _ := server.ScopeFromContext(r.Context())
		if tx, ok := mysqlstore.Tx(r.Context()); ok {
			_, err := tx.ExecContext(r.Context(), mwInsertEffectSQLite, sc.Principal, sc.Key, body)
			return err
		}
		if _, err := db.ExecContext(r.Context(), `INSERT INTO runs (generation) VALUES (?)`, gen); err != nil {
			return err
		}
		_, err := db.ExecContext(r.Context(), mwInsertEffectSQLite, sc.Principal, sc.Key, body)
		return err
	}
	return st, insert, nil
}

// mwNewMySQLKillTarget is a fresh MySQL database for the kill tests.
func mwNewMySQLKillTarget(t *testing.T) *mwKillTarget {
	t.Helper()
	cfg := testmysql.DatabaseConfig(t)
	return &mwKillTarget{kind: mwMySQL, target: cfg.FormatDSN(), count: func(t *testing.T, query string) int {
		t.Helper()
		connector, err := mysql.NewConnector(cfg)
		require.NoError(t, err)
		db := sql.OpenDB(connector)
		defer db.Close()
		var n int
		require.NoError(t, db.QueryRow(query).Scan(&n))
		return n
	}}
}

// mysqlProxyRig is a transactional-mode middleware on MySQL reached
// through a tcpfault.Proxy. Its handler writes one effect on the request's
// transaction, then calls afterEffect (which breaks the database path) and
// answers 201.
type mysqlProxyRig struct {
	proxy *tcpfault.Proxy
	db    *sql.DB // through the proxy
	srv   *httptest.Server
	runs  atomic.Int64
}

func newMySQLProxyRig(t *testing.T, storeTimeout time.Duration, afterEffect func(*tcpfault.Proxy)) *mysqlProxyRig {
	t.Helper()
	cfg := testmysql.DatabaseConfig(t)
	rig := &mysqlProxyRig{proxy: tcpfault.Start(t, cfg.Addr)}
	proxied := cfg.Clone()
	proxied.Addr = rig.proxy.Addr()
	proxied.Timeout = 2 * time.Second
	connector, err := mysql.NewConnector(proxied)
	require.NoError(t, err)
	rig.db = sql.OpenDB(connector)
	rig.db.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = rig.db.Close() })
	ctx := context.Background()
	store, err := mysqlstore.New(rig.db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = rig.db.ExecContext(ctx, mwEffectsTableMySQL)
	require.NoError(t, err)
	mw, err := server.New(store, &server.Config{PrincipalFunc: mwPrincipal, Mode: server.ModeTransactional,
		StoreTimeout: storeTimeout, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	require.NoError(t, err)
	rig.srv = httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.runs.Add(1)
		tx, _ := mysqlstore.Tx(r.Context())
		sc, _ := server.ScopeFromContext(r.Context())
		if _, err := tx.ExecContext(r.Context(), mwInsertEffectSQLite, sc.Principal, sc.Key, "paid"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		afterEffect(rig.proxy)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"paid":true}`)
	})))
	t.Cleanup(rig.srv.Close)
	return rig
}

func (rig *mysqlProxyRig) post(t *testing.T, key string) *mwResponse {
	t.Helper()
	return mwPost(t, rig.srv, "/pay", map[string]string{"X-Principal": "alice", server.HeaderKey: key}, `{}`)
}

// When the COMMIT reached MariaDB but its answer was lost, the transaction
// committed: the middleware must not answer "nothing was applied". It
// re-reads the record and sends the handler's response, or answers
// outcome-unknown; a retry with the same key replays.
func TestTransactionalCommit_LostAnswerIsNotReportedAsRollback_MySQL(t *testing.T) {
	t.Parallel()
	rig := newMySQLProxyRig(t, 5*time.Second, func(p *tcpfault.Proxy) { p.DropReplyTo(tcpfault.MySQLCommitQuery) })

	first := rig.post(t, "commit-1")
	require.Equal(t, 1, rig.proxy.Dropped(), "the proxy dropped the COMMIT's answer")
	var effects int
	require.NoError(t, rig.db.QueryRowContext(context.Background(), mwCountEffects).Scan(&effects))
	require.Equal(t, 1, effects, "the transaction committed")
	if first.Status == http.StatusServiceUnavailable {
		first.requireProblem(t, http.StatusServiceUnavailable, wire.ProblemOutcomeUnknown)
	} else {
		require.Equal(t, http.StatusCreated, first.Status, "body %s", first.Body)
		require.Equal(t, `{"paid":true}`, string(first.Body))
	}

	again := rig.post(t, "commit-1")
	require.Equal(t, http.StatusCreated, again.Status, "body %s", again.Body)
	require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
	require.EqualValues(t, 1, rig.runs.Load())
}

// A frozen database path in transactional mode (connections up, nothing
// moving) after the handler ran: every store call has a deadline, so the
// request is answered instead of hanging, and never with a replayable
// success that was not committed.
func TestTransactional_FrozenDatabaseAnswersInBoundedTime_MySQL(t *testing.T) {
	t.Parallel()
	rig := newMySQLProxyRig(t, 300*time.Millisecond, func(p *tcpfault.Proxy) { p.Freeze() })
	res := rig.post(t, "frozen-tx")
	require.Equal(t, http.StatusServiceUnavailable, res.Status, "body %s", res.Body)
	rig.proxy.Thaw()
}

// Connections cut after the handler ran: the request is a 503, nothing
// was applied, and the retry with the same key runs the handler once the
// database is back.
func TestTransactional_CutConnectionsRollBack_MySQL(t *testing.T) {
	t.Parallel()
	var cut atomic.Bool
	rig := newMySQLProxyRig(t, 2*time.Second, func(p *tcpfault.Proxy) {
		if cut.CompareAndSwap(false, true) {
			p.CutFor(0) // the first request only
		}
	})
	res := rig.post(t, "cut-tx")
	res.requireProblem(t, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable)
	var effects int
	require.NoError(t, rig.db.QueryRowContext(context.Background(), mwCountEffects).Scan(&effects))
	require.Zero(t, effects, "the cut transaction applied nothing")

	again := rig.post(t, "cut-tx")
	require.Equal(t, http.StatusCreated, again.Status, "body %s", again.Body)
	require.Empty(t, again.Header.Get(wire.HeaderReplayed))
	require.EqualValues(t, 2, rig.runs.Load())
}
