package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

func TestNew_RefusesEvictingRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t, "maxmemory", "64mb", "maxmemory-policy", "allkeys-lru")
	client := srv.Client(t)

	_, err := redisstore.New(client, nil)
	var policyErr *redisstore.EvictionPolicyError
	require.ErrorAs(t, err, &policyErr)
	require.Equal(t, "allkeys-lru", policyErr.Policy)
	require.ErrorContains(t, err, "maxmemory-policy")

	// The explicit override accepts it.
	_, err = redisstore.New(client, &redisstore.Config{AllowEviction: true})
	require.NoError(t, err)

	// noeviction is accepted without it.
	require.NoError(t, client.ConfigSet(storetest.Context(t), "maxmemory-policy", "noeviction").Err())
	_, err = redisstore.New(client, nil)
	require.NoError(t, err)
}

func TestNew_RefusesClusterWithOneEvictingMaster(t *testing.T) {
	t.Parallel()
	cluster := testredis.StartCluster(t)
	client := cluster.Client(t)
	_, err := redisstore.New(client, nil)
	require.NoError(t, err)

	evicting := cluster.Addrs[2]
	node := testredis.NodeClient(t, evicting)
	require.NoError(t, node.ConfigSet(storetest.Context(t), "maxmemory-policy", "volatile-ttl").Err())
	_, err = redisstore.New(client, nil)
	var policyErr *redisstore.EvictionPolicyError
	require.ErrorAs(t, err, &policyErr)
	require.Equal(t, evicting, policyErr.Addr)
	require.Equal(t, "volatile-ttl", policyErr.Policy)
	require.ErrorContains(t, err, "maxmemory-policy")
}

func TestStore_EvictionsCountsEvictedKeys(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	srv := testredis.Start(t, "maxmemory", "4mb", "maxmemory-policy", "allkeys-lru")
	client := srv.Client(t)
	store, err := redisstore.New(client, &redisstore.Config{AllowEviction: true})
	require.NoError(t, err)
	n, err := store.Evictions(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// 16 MB of values into 4 MB.
	value := strings.Repeat("x", 16<<10)
	for i := range 1024 {
		require.NoError(t, client.Set(ctx, fmt.Sprintf("filler:%d", i), value, 0).Err())
	}
	n, err = store.Evictions(ctx)
	require.NoError(t, err)
	require.Positive(t, n, "evicted_keys")
}

func TestStore_EvictionsSumsClusterMasters(t *testing.T) {
	t.Parallel()
	cluster := testredis.StartCluster(t)
	store, err := redisstore.New(cluster.Client(t), nil)
	require.NoError(t, err)
	n, err := store.Evictions(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
}

// A full Redis under noeviction refuses writes (OOM): a claim fails with
// server.ErrStoreFull, and the middleware answers 503 without running the
// handler; nothing is evicted.
func TestStore_FullRedisRefusesClaims(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	srv := testredis.Start(t, "maxmemory", "4mb", "maxmemory-policy", "noeviction")
	client := srv.Client(t)
	store, err := redisstore.New(client, nil)
	require.NoError(t, err)

	value := strings.Repeat("x", 16<<10)
	full := false
	for i := 0; i < 1024 && !full; i++ {
		full = client.Set(ctx, fmt.Sprintf("filler:%d", i), value, 0).Err() != nil
	}
	require.True(t, full, "16 MB never filled a 4 MB Redis")
	_, err = store.Claim(ctx, claimAt(time.Now(), "full", time.Minute, time.Hour))
	require.ErrorIs(t, err, server.ErrStoreFull)
	n, err := store.Evictions(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}
