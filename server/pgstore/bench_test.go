package pgstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// The baselines insert the same columns into an equivalent table, with the
// same driver and pool, in a plain INSERT: what a claim costs over the
// cheapest possible write.
const (
	benchRawTablePostgres = `CREATE TABLE raw_keys (
    principal text NOT NULL, endpoint text NOT NULL, key text NOT NULL, state text NOT NULL,
    fingerprint bytea NOT NULL, fingerprint_version integer NOT NULL, token bigint NOT NULL,
    locked_until timestamptz, created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
    PRIMARY KEY (principal, endpoint, key))`
	benchRawInsertPostgres = `INSERT INTO raw_keys
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
VALUES ($1, $2, $3, 'in_progress', $4, 1, 1, $5, $6, $7)`
)

func BenchmarkClaim(b *testing.B) {
	storetest.BenchClaimsAgainstBaseline(b,
		func(b *testing.B) server.Store { return setupPostgres(b).store },
		func(b *testing.B) func(ctx context.Context, key string) error {
			bundle := setupPostgres(b)
			if _, err := bundle.pool.Exec(bundle.ctx, benchRawTablePostgres); err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				now := time.Now()
				_, err := bundle.pool.Exec(ctx, benchRawInsertPostgres, "bench", "POST /payments", key, storetest.BenchFingerprint,
					now.Add(30*time.Second), now, now.Add(24*time.Hour))
				return err
			}
		})
}

// BenchmarkComplete is a claim and its completion, in lease mode and in
// transactional mode, with and without Config.NotifyChanges (with a
// listener running), in one run: the cost of pg_notify on the completion.
// Parallel runs 4 goroutines per CPU, each on its own key, so that commits
// that notify contend for PostgreSQL's notification lock.
func BenchmarkComplete(b *testing.B) {
	for _, notify := range []bool{false, true} {
		name := "NotifyOff"
		if notify {
			name = "NotifyOn"
		}
		b.Run(name, func(b *testing.B) {
			ctx := storetest.Context(b)
			cfg, err := pgxpool.ParseConfig(testpg.SchemaDSN(b))
			require.NoError(b, err)
			cfg.MaxConns = 8
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(b, err)
			b.Cleanup(pool.Close)
			store, err := pgstore.New(pool, &pgstore.Config{NotifyChanges: notify})
			require.NoError(b, err)
			b.Cleanup(store.Close)
			require.NoError(b, store.Migrate(ctx))
			if notify {
				_, stop, err := store.SubscribeChange(ctx, server.Scope{Principal: "bench", Endpoint: "listener", Key: "running"})
				require.NoError(b, err)
				b.Cleanup(stop)
			}
			var n atomic.Int64
			resp := &server.StoredResponse{Status: 201, Body: []byte(`{"id":"pay_1","status":"captured"}`)}
			lease := func() error {
				sc := server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: "k-" + strconv.FormatInt(n.Add(1), 10)}
				now := time.Now()
				res, err := store.Claim(ctx, server.ClaimRequest{Scope: sc, Fingerprint: storetest.BenchFingerprint,
					FingerprintVersion: 1, Now: now, LockedUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)})
				if err != nil {
					return err
				}
				return store.Complete(ctx, sc, res.Token, now, resp)
			}
			transactional := func() error {
				sc := server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: "k-" + strconv.FormatInt(n.Add(1), 10)}
				now := time.Now()
				tx, err := store.BeginTx(ctx, 0)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback(ctx) }()
				res, err := tx.Claim(ctx, server.ClaimRequest{Scope: sc, Fingerprint: storetest.BenchFingerprint,
					FingerprintVersion: 1, Now: now, LockedUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)})
				if err != nil {
					return err
				}
				if err := tx.Complete(ctx, sc, res.Token, now, resp); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}
			for _, mode := range []struct {
				name string
				op   func() error
			}{{"Lease", lease}, {"Transactional", transactional}} {
				b.Run(mode.name+"/Serial", func(b *testing.B) {
					for b.Loop() {
						if err := mode.op(); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run(mode.name+"/Parallel", func(b *testing.B) {
					b.SetParallelism(4)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := mode.op(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}
