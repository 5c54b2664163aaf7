package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testdb"
	"github.com/idemkit/idemkit/internal/testpg"
)

// With -redis the server section measures Redis's own baseline and the
// Redis store next to the PostgreSQL ones, under the same checks, and
// leaves no key behind.
func TestShortRun_RedisModesPassEveryCheck(t *testing.T) {
	t.Parallel()
	cfg := shortConfig(t)
	cfg.DSN = testpg.BaseDSN(t)
	cfg.Redis = testdb.DSN(t, testdb.Redis)
	cfg.Server = true
	cfg.Modes = []string{"redis-handwritten", "redis-lease"}
	var table strings.Builder
	_, err := run(context.Background(), cfg, &table, io.Discard)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	modes := []string{redisBaseline, "redis-lease"}
	requireCells(t, r, "redis", scenarioNewKey, modes, cfg.Clients)
	requireCells(t, r, "redis", scenarioReplay, modes, cfg.Clients)
	requireCells(t, r, "server", scenarioNewKey, []string{baselineMode, naiveMode, overheadMode}, cfg.Clients)
	require.Contains(t, table.String(), "| redis-lease | 3 |")

	opts, err := redis.ParseURL(cfg.Redis)
	require.NoError(t, err)
	client := redis.NewClient(opts)
	defer client.Close()
	var left []string
	iter := client.Scan(context.Background(), 0, "bench:"+r.Settings.PostgresSchema+":*", 1000).Iterator()
	for iter.Next(context.Background()) {
		left = append(left, iter.Val())
	}
	require.NoError(t, iter.Err())
	require.Empty(t, left, "the run's Redis keys were not deleted")
}
