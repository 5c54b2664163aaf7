package server_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/server"
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

	benchRawTablePostgres = `CREATE TABLE raw_keys (
    principal text NOT NULL, endpoint text NOT NULL, key text NOT NULL, state text NOT NULL,
    fingerprint bytea NOT NULL, fingerprint_version integer NOT NULL, token bigint NOT NULL,
    locked_until timestamptz, created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
    PRIMARY KEY (principal, endpoint, key))`
	benchRawInsertPostgres = `INSERT INTO raw_keys
    (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
VALUES ($1, $2, $3, 'in_progress', $4, 1, 1, $5, $6, $7)`
)

var benchFingerprint = func() []byte { h := sha256.Sum256([]byte(`{"amount":4000}`)); return h[:] }()

// benchClaims runs claim with a fresh key per call, serially and in
// parallel.
func benchClaims(b *testing.B, claim func(ctx context.Context, key string) error) {
	ctx := context.Background()
	var n atomic.Int64
	b.Run("Serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := claim(ctx, "k-"+strconv.FormatInt(n.Add(1), 10)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := claim(ctx, "k-"+strconv.FormatInt(n.Add(1), 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func benchStoreClaim(store server.Store) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		now := time.Now()
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: key},
			Fingerprint: benchFingerprint, FingerprintVersion: 1,
			Now: now, ExpiresAt: now.Add(24 * time.Hour), LockedUntil: now.Add(30 * time.Second),
		})
		if err == nil && !res.Acquired {
			return errors.New("claim of a fresh key did not acquire")
		}
		return err
	}
}

func BenchmarkClaim(b *testing.B) {
	b.Run("SQLite/Store", func(b *testing.B) {
		benchClaims(b, benchStoreClaim(setupSQLite(b).store))
	})
	b.Run("SQLite/RawInsert", func(b *testing.B) {
		bundle := setupSQLite(b)
		if _, err := bundle.db.ExecContext(bundle.ctx, benchRawTableSQLite); err != nil {
			b.Fatal(err)
		}
		benchClaims(b, func(ctx context.Context, key string) error {
			now := time.Now().UTC()
			_, err := bundle.db.ExecContext(ctx, benchRawInsertSQLite, "bench", "POST /payments", key, benchFingerprint,
				now.Add(30*time.Second).Format(time.RFC3339Nano), now.Format(time.RFC3339Nano), now.Add(24*time.Hour).Format(time.RFC3339Nano))
			return err
		})
	})
	b.Run("Postgres/Store", func(b *testing.B) {
		benchClaims(b, benchStoreClaim(setupPostgres(b).store))
	})
	b.Run("Postgres/RawInsert", func(b *testing.B) {
		bundle := setupPostgres(b)
		if _, err := bundle.pool.Exec(bundle.ctx, benchRawTablePostgres); err != nil {
			b.Fatal(err)
		}
		benchClaims(b, func(ctx context.Context, key string) error {
			now := time.Now()
			_, err := bundle.pool.Exec(ctx, benchRawInsertPostgres, "bench", "POST /payments", key, benchFingerprint,
				now.Add(30*time.Second), now, now.Add(24*time.Hour))
			return err
		})
	})
}
