// Package testpg gives each test its own PostgreSQL schema.
//
// Tests that need PostgreSQL read the DSN from IDEM_TEST_POSTGRES. When it is
// unset they skip with a message saying so, except under CI=true, where the
// missing database is a test failure: a skipped test proves nothing.
package testpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testdb"
)

// EnvDSN is the environment variable holding the test database DSN.
const EnvDSN = testdb.Postgres

// BaseDSN returns the DSN from IDEM_TEST_POSTGRES, skipping the test when it
// is unset (failing it under CI=true).
func BaseDSN(t testing.TB) string {
	t.Helper()
	return testdb.DSN(t, EnvDSN)
}

// SchemaDSN creates a fresh, empty schema for this test and returns a DSN
// whose search_path points at it, so that child processes started by the test
// can use it too. The schema is dropped when the test ends.
func SchemaDSN(t testing.TB) string {
	t.Helper()
	base := BaseDSN(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	schema := "idemtest_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to %s: %v", EnvDSN, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		// Key/value DSN form.
		return base + " search_path=" + schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Pool returns a pool on a fresh schema of its own (see SchemaDSN). The pool
// is closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := SchemaDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("ping: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
