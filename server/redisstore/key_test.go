package redisstore_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// hostileScopes have bytes that would break a key built from the scope's
// text: hash-tag braces, NUL, newlines, separators, invalid UTF-8.
var hostileScopes = []server.Scope{
	{Principal: "{a}", Endpoint: "POST /x", Key: "k"},
	{Principal: "a", Endpoint: "{POST /x}", Key: "}{"},
	{Principal: "a\x00b", Endpoint: "*", Key: "k\r\n*3\r\n$3\r\nDEL"},
	{Principal: "a", Endpoint: "*", Key: "\xff\xfe{" + strings.Repeat("z", 4096)},
	{Principal: "a|b", Endpoint: "c", Key: "d"},
	{Principal: "a", Endpoint: "b|c", Key: "d"},
}

func TestStore_KeyIsOneHashTagWhateverTheScope(t *testing.T) {
	t.Parallel()
	client, prefix := testredis.Shared(t)
	store, err := redisstore.New(client, &redisstore.Config{Prefix: prefix})
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, sc := range hostileScopes {
		key := redisstore.Key(store, sc)
		rest, ok := strings.CutPrefix(key, prefix+"{")
		require.True(t, ok, "key %q", key)
		require.True(t, strings.HasSuffix(rest, "}"), "key %q", key)
		require.NotContains(t, rest[:len(rest)-1], "{")
		require.NotContains(t, rest[:len(rest)-1], "}")
		require.False(t, seen[key], "two scopes share key %q", key)
		seen[key] = true
	}
}

func TestNew_RefusesPrefixWithBraces(t *testing.T) {
	t.Parallel()
	client, _ := testredis.Shared(t)
	_, err := redisstore.New(client, &redisstore.Config{Prefix: "app{1}:"})
	require.ErrorContains(t, err, "Prefix")
}

func TestStore_HostileScopesOnCluster(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	cluster := testredis.StartCluster(t)
	store, err := redisstore.New(cluster.Client(t), nil)
	require.NoError(t, err)
	now := time.Now()
	for i, sc := range hostileScopes {
		req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{byte(i)}, FingerprintVersion: 1,
			Now: now, LockedUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		res, err := store.Claim(ctx, req)
		require.NoError(t, err, "scope %q", sc)
		require.True(t, res.Acquired, "scope %q", sc)
		require.NoError(t, store.Complete(ctx, sc, res.Token, now, &server.StoredResponse{Status: http.StatusOK, Body: []byte(sc.Key)}))
	}
	for _, sc := range hostileScopes {
		rec, err := store.Get(ctx, sc, now)
		require.NoError(t, err, "scope %q", sc)
		require.Equal(t, sc.Key, string(rec.Response.Body))
	}
}
