package idemriver_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testpg"
)

// ctxTimeout bounds the tests' contexts: longer than testkit.CtxTimeout,
// for River's workers on Postgres on a loaded machine under -race.
const ctxTimeout = 90 * time.Second

// testBundle is a migrated schema of its own, a small pool on it and a
// Client (not started).
type testBundle struct {
	dsn    string
	schema string
	pool   *pgxpool.Pool
	client *idemriver.Client
}

// setup migrates a fresh schema and returns a Client on it configured by cfg
// (tests' defaults: poll-only, fast polling, logs at WARN to stderr).
func setup(t *testing.T, cfg *idemriver.Config) *testBundle {
	t.Helper()
	dsn := testpg.SchemaDSN(t)
	ctx := testkit.CtxFor(t, ctxTimeout)
	pool, schema, err := openPool(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, idemriver.Migrate(ctx, pool, schema))
	c, err := idemriver.NewClient(pool, testConfig(cfg, schema))
	require.NoError(t, err)
	return &testBundle{dsn: dsn, schema: schema, pool: pool, client: c}
}

// openPool opens a small pool on dsn and returns it with its schema.
func openPool(ctx context.Context, dsn string) (*pgxpool.Pool, string, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, "", err
	}
	pcfg.MaxConns = 5
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, "", err
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, "", err
	}
	return pool, schema, nil
}

func testConfig(cfg *idemriver.Config, schema string) *idemriver.Config {
	var c idemriver.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = schema
	c.PollOnly = true
	if c.FetchPollInterval == 0 {
		c.FetchPollInterval = 50 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	return &c
}

// start starts b's client until the test ends.
func (b *testBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = b.client.Stop(ctx)
	})
}

func fixedBackoff(d time.Duration) func(time.Duration, time.Duration, int, *http.Response) time.Duration {
	return func(time.Duration, time.Duration, int, *http.Response) time.Duration { return d }
}
