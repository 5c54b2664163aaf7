package redisstore_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

func TestStore_WaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	master := testredis.Start(t)
	client := master.Client(t)
	cfg := &redisstore.Config{WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond}
	store, err := redisstore.New(client, cfg)
	require.NoError(t, err)

	// No replica: the claim is refused, and given back.
	req := claimAt(time.Now(), "replicated", time.Minute, time.Hour)
	_, err = store.Claim(ctx, req)
	require.ErrorIs(t, err, redisstore.ErrReplicasBehind)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	_, err = store.Get(ctx, req.Scope, time.Now())
	require.ErrorIs(t, err, server.ErrRecordNotFound, "the unreplicated claim is released")
	require.Zero(t, redisstore.HeldClaims(store))

	// With a replica attached, the claim waits for it and succeeds.
	replica := testredis.Start(t)
	host, port, err := net.SplitHostPort(master.Addr)
	require.NoError(t, err)
	require.NoError(t, replica.Client(t).Do(ctx, "REPLICAOF", host, port).Err())
	require.Eventually(t, func() bool {
		info, err := client.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 20*time.Second, 20*time.Millisecond, "the replica never came online")
	cfg.WaitTimeout = 5 * time.Second
	store, err = redisstore.New(client, cfg)
	require.NoError(t, err)
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	n, err := replica.Client(t).Exists(ctx, redisstore.Key(store, req.Scope)).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the claim is on the replica when Claim returns")
}
