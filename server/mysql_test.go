package server_test

import (
	"context"
	"database/sql"
	"net/http"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testmysql"
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
