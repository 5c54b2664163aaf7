package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

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
