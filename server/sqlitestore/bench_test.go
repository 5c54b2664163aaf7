package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/storetest"
)

const (
	benchRawTable  = `CREATE TABLE raw_keys (principal TEXT NOT NULL, endpoint TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL, fingerprint BLOB NOT NULL, fingerprint_version INTEGER NOT NULL, token INTEGER NOT NULL, locked_until TEXT, created_at TEXT NOT NULL, expires_at TEXT NOT NULL, PRIMARY KEY (principal, endpoint, key)) STRICT`
	benchRawInsert = `INSERT INTO raw_keys (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at) VALUES (?, ?, ?, 'in_progress', ?, 1, 1, ?, ?, ?)`
)

func BenchmarkClaim(b *testing.B) {
	storetest.BenchClaimsAgainstBaseline(b,
		func(b *testing.B) server.Store { return setupSQLite(b).store },
		func(b *testing.B) func(ctx context.Context, key string) error {
			db := setupSQLite(b).db
			if _, err := db.Exec(benchRawTable); err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, key string) error {
				now := time.Now().UTC()
				_, err := db.ExecContext(ctx, benchRawInsert, "bench", "POST /payments", key, storetest.BenchFingerprint,
					now.Add(30*time.Second).Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), now.Add(24*time.Hour).Format(time.RFC3339Nano))
				return err
			}
		})
}
