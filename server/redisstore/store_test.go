package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// capabilities: Redis serves lease mode only and expires records by TTL.
var capabilities = storetest.Capabilities{LeaseOnly: true, SelfExpiring: true}

// newStore returns a store on client with prefix, deciding by the caller's
// clock so that the suite can move time.
func newStore(t testing.TB, client redis.UniversalClient, prefix string) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	return redisstore.WithCallerClock(store)
}

func TestRedisStore_Conformance(t *testing.T) {
	t.Parallel()
	storetest.RunWith(t, capabilities, func(t *testing.T) server.Store {
		client, prefix := testredis.Shared(t)
		return newStore(t, client, prefix)
	})
}

func TestRedisStore_ClusterConformance(t *testing.T) {
	t.Parallel()
	cluster := testredis.StartCluster(t)
	client := cluster.Client(t)
	var n atomic.Int64
	storetest.RunWith(t, capabilities, func(t *testing.T) server.Store {
		return newStore(t, client, fmt.Sprintf("case%d:", n.Add(1)))
	})
}

// sharedPrefix returns a client of the shared Redis and a key prefix of
// t's own.
func sharedPrefix(t *testing.T) (*redis.Client, string) {
	t.Helper()
	return testredis.Shared(t)
}

func TestServerNew_RefusesQuotasOnRedis(t *testing.T) {
	t.Parallel()
	client, prefix := testredis.Shared(t)
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	principal := func(*http.Request) (string, error) { return "p", nil }
	_, err = server.New(store, &server.Config{PrincipalFunc: principal, MaxKeysPerPrincipal: 10})
	require.ErrorContains(t, err, "PrincipalUsage")
}

func TestStore_BeginTxIsLeaseOnly(t *testing.T) {
	t.Parallel()
	client, prefix := testredis.Shared(t)
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	_, err = store.BeginTx(context.Background(), time.Second)
	require.ErrorIs(t, err, redisstore.ErrLeaseOnly)
}

func TestNew_Validate(t *testing.T) {
	t.Parallel()
	_, err := redisstore.New(nil, nil)
	require.ErrorContains(t, err, "client is nil")
	cfg := (*redisstore.Config)(nil).WithDefaults()
	require.Equal(t, "idemkit:", cfg.Prefix)
	require.Equal(t, time.Second, cfg.WaitTimeout)
	require.Equal(t, 10*time.Second, cfg.CheckTimeout)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for _, tc := range []struct {
		cfg  redisstore.Config
		want string
	}{
		{redisstore.Config{WaitReplicas: -1}, "WaitReplicas"},
		{redisstore.Config{WaitTimeout: -time.Second}, "WaitTimeout"},
		{redisstore.Config{CheckTimeout: -time.Second}, "CheckTimeout"},
		{redisstore.Config{Prefix: "}"}, "Prefix"},
	} {
		_, err := redisstore.New(client, &tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	// An unreachable server cannot be checked: New fails, within CheckTimeout.
	_, err = redisstore.New(client, &redisstore.Config{CheckTimeout: time.Second})
	require.ErrorContains(t, err, "maxmemory-policy")
}
