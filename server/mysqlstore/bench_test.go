package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/testmysql"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/mysqlstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// The baseline is the article's hand-written idempotency on MySQL: in one
// transaction, INSERT the key and catch the duplicate-key error (1062),
// reading the stored response when it is caught; the same columns, driver,
// pool and interpolateParams as the store.
const (
	benchRawTableMySQL = "CREATE TABLE raw_keys (" +
		"principal VARBINARY(512) NOT NULL, endpoint VARBINARY(512) NOT NULL, `key` VARBINARY(255) NOT NULL, " +
		"state VARCHAR(16) NOT NULL, fingerprint VARBINARY(255) NOT NULL, response_body LONGBLOB NULL, " +
		"created_at DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL, " +
		"PRIMARY KEY (principal, endpoint, `key`)) ENGINE = InnoDB"
	benchRawInsertMySQL = "INSERT INTO raw_keys (principal, endpoint, `key`, state, fingerprint, created_at, expires_at) " +
		"VALUES (?, ?, ?, 'in_progress', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 DAY)"
	benchRawSelectMySQL = "SELECT state, response_body FROM raw_keys WHERE principal = ? AND endpoint = ? AND `key` = ?"
)

// benchDB is a pool of connections on a fresh database, with
// interpolateParams (one round trip per statement).
func benchDB(b *testing.B) *sql.DB {
	cfg := testmysql.DatabaseConfig(b)
	cfg.InterpolateParams = true
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(testmysql.MaxOpenConns)
	db.SetMaxIdleConns(testmysql.MaxOpenConns)
	b.Cleanup(func() { _ = db.Close() })
	return db
}

func benchStore(b *testing.B) *mysqlstore.Store {
	store, err := mysqlstore.New(benchDB(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return store
}

// rawInsertAndCatch is the baseline: one transaction that inserts key or,
// on 1062, reads what is stored.
func rawInsertAndCatch(b *testing.B) func(ctx context.Context, key string) error {
	db := benchDB(b)
	if _, err := db.Exec(benchRawTableMySQL); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		_, err = tx.ExecContext(ctx, benchRawInsertMySQL, "bench", "POST /payments", key, storetest.BenchFingerprint)
		var myErr *mysql.MySQLError
		if errors.As(err, &myErr) && myErr.Number == 1062 {
			var (
				state string
				body  []byte
			)
			if err := tx.QueryRowContext(ctx, benchRawSelectMySQL, "bench", "POST /payments", key).Scan(&state, &body); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		return tx.Commit()
	}
}

// BenchmarkClaim: a claim of a new key, lease mode (committed on return),
// next to the baseline's insert of a new key.
func BenchmarkClaim(b *testing.B) {
	storetest.BenchClaimsAgainstBaseline(b,
		func(b *testing.B) server.Store { return benchStore(b) },
		rawInsertAndCatch)
}

// BenchmarkReplay: a claim of a key whose response is stored (the
// duplicate-key error, then the read), next to the baseline's.
func BenchmarkReplay(b *testing.B) {
	const keys = 64
	ctx := context.Background()
	b.Run("Store", func(b *testing.B) {
		store := benchStore(b)
		claim := storetest.ClaimFunc(store)
		for i := range keys {
			key := "r-" + strconv.Itoa(i)
			if err := claim(ctx, key); err != nil {
				b.Fatal(err)
			}
			sc := server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: key}
			if err := store.Complete(ctx, sc, 1, time.Now(), &server.StoredResponse{Status: 201, Body: []byte(`{"id":"pay_1"}`)}); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				now := time.Now()
				res, err := store.Claim(ctx, server.ClaimRequest{
					Scope:       server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: "r-" + strconv.FormatInt(n.Add(1)%keys, 10)},
					Fingerprint: storetest.BenchFingerprint, FingerprintVersion: 1,
					Now: now, ExpiresAt: now.Add(24 * time.Hour), LockedUntil: now.Add(30 * time.Second),
				})
				if err != nil || res.Acquired || res.Existing.State != server.StateCompleted {
					b.Errorf("replay: %+v, %v", res, err)
					return
				}
			}
		})
	})
	b.Run("RawInsertAndCatch", func(b *testing.B) {
		claim := rawInsertAndCatch(b)
		for i := range keys {
			if err := claim(ctx, "r-"+strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := claim(ctx, "r-"+strconv.FormatInt(n.Add(1)%keys, 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
