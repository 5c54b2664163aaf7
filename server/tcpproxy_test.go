package server_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/testpg"
)

// proxiedPostgres is a fresh schema reached through a tcpfault.Proxy: pool goes
// through the proxy, direct does not (for checks while the proxy is cut).
type proxiedPostgres struct {
	proxy  *tcpfault.Proxy
	pool   *pgxpool.Pool
	direct *pgxpool.Pool
}

func newProxiedPostgres(t testing.TB) *proxiedPostgres {
	t.Helper()
	dsn := testpg.SchemaDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err, "IDEM_TEST_POSTGRES must be a URL for the proxy tests")
	p := tcpfault.Start(t, u.Host)
	pu := *u
	pu.Host = p.Addr()
	q := pu.Query()
	q.Set("connect_timeout", "2")
	pu.RawQuery = q.Encode()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pu.String())
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	direct, err := pgxpool.New(ctx, dsn+"&pool_max_conns=2")
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		direct.Close()
	})
	require.NoError(t, pool.Ping(ctx))
	return &proxiedPostgres{proxy: p, pool: pool, direct: direct}
}
