// Package testmysql gives each test its own MariaDB/MySQL database.
//
// Tests that need MySQL read the DSN (go-sql-driver form,
// root@tcp(127.0.0.1:3306)/test) from IDEM_TEST_MYSQL. When it is unset they
// skip with a message saying so, except under CI=true, where the missing
// database is a test failure: a skipped test proves nothing.
package testmysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit/internal/testdb"
)

// EnvDSN is the environment variable holding the test database DSN.
const EnvDSN = testdb.MySQL

// MaxOpenConns bounds the pool of each test: the server's max_connections
// is shared by every test and every helper on the machine.
const MaxOpenConns = 8

// Config returns the parsed DSN from IDEM_TEST_MYSQL, skipping the test when
// it is unset (failing it under CI=true).
func Config(t testing.TB) *mysql.Config {
	t.Helper()
	cfg, err := mysql.ParseDSN(testdb.DSN(t, EnvDSN))
	if err != nil {
		t.Fatalf("%s: %v", EnvDSN, err)
	}
	return cfg
}

// DatabaseConfig creates a fresh, empty database for this test and returns
// the driver configuration of a connection to it, so that the test can open
// more pools (or child processes) on it. The database is dropped when the
// test ends.
func DatabaseConfig(t testing.TB) *mysql.Config {
	t.Helper()
	base := Config(t)
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "idemtest_" + hex.EncodeToString(b[:])

	admin := base.Clone()
	admin.DBName = ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := open(t, admin, 1)
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db, err := sql.Open("mysql", admin.FormatDSN())
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	cfg := base.Clone()
	cfg.DBName = name
	return cfg
}

// DSN is DatabaseConfig formatted as a go-sql-driver DSN.
func DSN(t testing.TB) string {
	t.Helper()
	return DatabaseConfig(t).FormatDSN()
}

// DB returns a pool of at most MaxOpenConns connections on a fresh
// database of its own (see DatabaseConfig). The pool is closed when the
// test ends.
func DB(t testing.TB) *sql.DB {
	t.Helper()
	db := open(t, DatabaseConfig(t), MaxOpenConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// open opens and pings a pool of at most maxOpen connections on cfg.
func open(t testing.TB, cfg *mysql.Config, maxOpen int) *sql.DB {
	t.Helper()
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysql.NewConnector: %v", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		t.Fatalf("ping MySQL: %v", err)
	}
	return db
}

// URL creates a fresh database (see DatabaseConfig) and returns it as the
// URL form mysql://user:pass@host:port/database that examples/payments
// takes in --dsn.
func URL(t testing.TB) string {
	t.Helper()
	cfg := DatabaseConfig(t)
	u := &url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else {
		u.User = url.User(cfg.User)
	}
	return u.String()
}
