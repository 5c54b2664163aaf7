package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/server"
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
