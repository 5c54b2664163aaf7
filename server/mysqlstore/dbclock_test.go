package mysqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/mysqlstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// The database's clock decides leases and expiry: a replica whose clock is
// an hour ahead cannot take over a live lease nor see a live record as
// expired, and one an hour behind cannot keep an expired record alive; the
// caller's now only anchors the lease and the window.
func TestMySQLStore_DatabaseClockDecides(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	store, err := mysqlstore.New(testmysql.DB(t), nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	req := func(now time.Time, lease, window time.Duration) server.ClaimRequest {
		return server.ClaimRequest{Scope: server.Scope{Principal: "p", Endpoint: "e", Key: "k"},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now, ExpiresAt: now.Add(window), LockedUntil: now.Add(lease)}
	}
	now := time.Now()
	res, err := store.Claim(ctx, req(now, time.Minute, time.Hour))
	require.NoError(t, err)
	require.True(t, res.Acquired)

	ahead := now.Add(2 * time.Hour)
	res, err = store.Claim(ctx, req(ahead, time.Minute, time.Hour))
	require.NoError(t, err)
	require.False(t, res.Acquired, "a caller whose clock is ahead must not take over a live lease")
	rec, err := store.Get(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: "k"}, ahead)
	require.NoError(t, err, "nor see the record as expired")
	require.WithinDuration(t, now.Add(time.Minute), rec.LockedUntil, 30*time.Second, "the lease runs from the database's clock")

	// A lease of 1ms has run out by the database's clock at the next
	// statement, whatever the caller's clock says.
	sc := server.Scope{Principal: "p", Endpoint: "e", Key: "short"}
	short := req(now.Add(-time.Hour), time.Millisecond, time.Hour)
	short.Scope = sc
	res, err = store.Claim(ctx, short)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Eventually(t, func() bool {
		res, err := store.Claim(ctx, short)
		return err == nil && res.Acquired && res.TakenOver && res.Token == 2
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, store.ExtendLease(ctx, sc, 2, now.Add(-time.Hour), time.Hour))
	rec, err = store.Get(ctx, sc, now)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(time.Hour), rec.LockedUntil, 30*time.Second)
}

// The store's times do not depend on the session's time zone nor on the
// DSN's parseTime and loc: times are written and read in UTC, as text.
func TestMySQLStore_TimeZoneIndependent(t *testing.T) {
	t.Parallel()
	ctx := storetest.Context(t)
	cfg := testmysql.DatabaseConfig(t)
	cfg.ParseTime = true
	cfg.Loc = time.FixedZone("UTC-7", -7*3600)
	cfg.Params = map[string]string{"time_zone": "'+05:00'"}
	db := openPool(t, cfg)
	store, err := mysqlstore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "e", Key: "tz"}
	res, err := store.Claim(ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: now, ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Minute)})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	rec, err := store.Get(ctx, sc, now)
	require.NoError(t, err)
	require.WithinDuration(t, now, rec.CreatedAt, 30*time.Second, "created_at is the database's UTC clock, whatever the session's zone")
	require.WithinDuration(t, now.Add(time.Hour), rec.ExpiresAt, 30*time.Second)
	require.Equal(t, time.UTC, rec.CreatedAt.Location())
	require.NoError(t, store.Complete(ctx, sc, res.Token, now, &server.StoredResponse{Status: 201}))
	st, err := store.Stats(ctx, now)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Rows)
	require.Zero(t, st.Expired)
	require.WithinDuration(t, now, st.OldestCreatedAt, 30*time.Second)
}
