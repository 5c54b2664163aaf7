package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/server/storetest"
)

// The baselines insert the same columns into an equivalent table, with the
// same driver and pool, in a plain INSERT: what a claim costs over the
// cheapest possible write.
const (
	benchRawTableSQLite = `CREATE TABLE raw_keys (
    principal TEXT NOT NULL, endpoint TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL,
    fingerprint BLOB NOT NULL, fingerprint_version INTEGER NOT NULL, token INTEGER NOT NULL,
    locked_until TEXT, created_at TEXT NOT NULL, expires_at TEXT NOT NULL,
    PRIMARY KEY (principal, endpoint, key)) STRICT`
	benchRawInsertSQLite = `INSERT INTO raw_keys
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
VALUES (?, ?, ?, 'in_progress', ?, 1, 1, ?, ?, ?)`
)

func BenchmarkClaim(b *testing.B) {
	b.Run("Store", func(b *testing.B) {
		storetest.BenchClaims(b, storetest.ClaimFunc(setupSQLite(b).store))
	})
	b.Run("RawInsert", func(b *testing.B) {
		bundle := setupSQLite(b)
		if _, err := bundle.db.ExecContext(bundle.ctx, benchRawTableSQLite); err != nil {
			b.Fatal(err)
		}
		storetest.BenchClaims(b, func(ctx context.Context, key string) error {
			now := time.Now().UTC()
			_, err := bundle.db.ExecContext(ctx, benchRawInsertSQLite, "bench", "POST /payments", key, storetest.BenchFingerprint,
				now.Add(30*time.Second).Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), now.Add(24*time.Hour).Format(time.RFC3339Nano))
			return err
		})
	})
}
