package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

func claimAt(now time.Time, key string, lease, window time.Duration) server.ClaimRequest {
	return server.ClaimRequest{
		Scope:       server.Scope{Principal: "p", Endpoint: "POST /payments", Key: key},
		Fingerprint: []byte("fp"), FingerprintVersion: 1,
		Now: now, LockedUntil: now.Add(lease), ExpiresAt: now.Add(window),
	}
}

// A caller whose clock is far off cannot take over a live lease, nor see
// a live record as expired: Redis's TIME decides, the caller's times only
// give the durations.
func TestStore_DecidesByRedisTime(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	client, prefix := testredis.Shared(t)
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)

	redisNow, err := client.Time(ctx).Result()
	require.NoError(t, err)
	past := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	req := claimAt(past, "skewed", 10*time.Second, time.Hour)
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)

	rec, err := store.Get(ctx, req.Scope, past)
	require.NoError(t, err)
	require.WithinDuration(t, redisNow.Add(10*time.Second), rec.LockedUntil, 5*time.Second, "the lease runs from Redis's clock")
	require.WithinDuration(t, redisNow.Add(time.Hour), rec.ExpiresAt, 5*time.Second, "the window runs from Redis's clock")

	// A caller a day ahead sees the lease as live and the record as present.
	ahead := redisNow.Add(24 * time.Hour)
	dup, err := store.Claim(ctx, claimAt(ahead, "skewed", 10*time.Second, time.Hour))
	require.NoError(t, err)
	require.False(t, dup.Acquired, "a caller whose clock is ahead took over a live lease")
	_, err = store.Get(ctx, req.Scope, ahead)
	require.NoError(t, err)
}

// The key's TTL is the window: Redis deletes the record itself.
func TestStore_RecordExpiresByTTL(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	client, prefix := testredis.Shared(t)
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)

	const window = time.Second
	req := claimAt(time.Now(), "short", 50*time.Millisecond, window)
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	key := redisstore.Key(store, req.Scope)
	ttl, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.True(t, ttl > 0 && ttl <= window, "PTTL %v, want the window (%v) or less", ttl, window)

	require.Eventually(t, func() bool {
		n, err := client.Exists(ctx, key).Result()
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond, "Redis never deleted the expired record")
	_, err = store.Get(ctx, req.Scope, time.Now())
	require.ErrorIs(t, err, server.ErrRecordNotFound)
	n, err := store.Sweep(ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, n)

	// The completion of a claim whose record expired is refused.
	require.ErrorIs(t, store.Complete(ctx, req.Scope, res.Token, time.Now(), &server.StoredResponse{Status: 200}), server.ErrLeaseLost)
	require.Zero(t, redisstore.HeldClaims(store), "a refused claim is forgotten")
}
