package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/mysqlstore"
)

// mysqlBaseline is the mysql section's baseline: the source article's
// hand-written idempotency on MySQL.
const mysqlBaseline = "insert-and-catch"

// mysqlSchema is the mysql section's tables: the effect (as bench_payments
// in PostgreSQL) and the baseline's idempotency table.
var mysqlSchema = []string{
	"CREATE TABLE bench_payments (" +
		"id VARCHAR(64) NOT NULL PRIMARY KEY, mode VARCHAR(32) NOT NULL, cell INT NOT NULL, " +
		"idem_key VARBINARY(255) NOT NULL, account VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, " +
		"created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), KEY bench_payments_cell_idx (cell)) ENGINE = InnoDB",
	"CREATE TABLE handwritten_keys (" +
		"principal VARBINARY(255) NOT NULL, `key` VARBINARY(255) NOT NULL, fingerprint VARBINARY(32) NOT NULL, " +
		"status SMALLINT NULL, body LONGBLOB NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), " +
		"expires_at DATETIME(6) NOT NULL, PRIMARY KEY (principal, `key`)) ENGINE = InnoDB",
}

// mysqlEnv is the mysql section's database (created for the run, dropped
// by close), idemkit's mysqlstore in it and the server of its modes.
type mysqlEnv struct {
	target
	db       *sql.DB
	version  string
	database string
	close    func()
}

// newMySQLEnv creates a database of its own on cfg.MySQLDSN's server,
// idemkit's store and the benchmark tables in it, and serves the section's
// modes on 127.0.0.1: the baseline, idemkit's transactional and lease mode.
func newMySQLEnv(ctx context.Context, cfg config) (env *mysqlEnv, err error) {
	base, err := mysql.ParseDSN(cfg.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("-mysql-dsn: %w", err)
	}
	env = &mysqlEnv{database: "idemkit_bench_" + uuid.NewString()[:8], target: target{section: "mysql"}}
	env.effects = env.countEffects
	admin := base.Clone()
	admin.DBName = ""
	adminDB, err := openMySQL(admin, 1)
	if err != nil {
		return nil, err
	}
	defer adminDB.Close()
	if err := adminDB.QueryRowContext(ctx, "SELECT VERSION()").Scan(&env.version); err != nil {
		return nil, fmt.Errorf("connect to MySQL: %w", err)
	}
	if _, err := adminDB.ExecContext(ctx, "CREATE DATABASE "+env.database+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, err
	}
	var closers []func()
	env.close = func() {
		for _, f := range slices.Backward(closers) {
			f()
		}
	}
	closers = append(closers, func() {
		if db, err := openMySQL(admin, 1); err == nil {
			_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+env.database)
			_ = db.Close()
		}
	})
	defer func() {
		if err != nil {
			env.close()
		}
	}()
	dbCfg := base.Clone()
	dbCfg.DBName = env.database
	// One round trip per statement, as mysqlstore's documentation asks.
	dbCfg.InterpolateParams = true
	if env.db, err = openMySQL(dbCfg, cfg.Pool); err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = env.db.Close() })
	store, err := mysqlstore.New(env.db, nil)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	for _, stmt := range mysqlSchema {
		if _, err := env.db.ExecContext(ctx, stmt); err != nil {
			return nil, err
		}
	}
	if env.modes, err = mysqlModes(env.db, store); err != nil {
		return nil, err
	}
	if env.modes, err = selectSectionModes(env.modes, mysqlBaseline, cfg.Modes); err != nil {
		return nil, err
	}
	stop, err := env.serve(cfg.maxClients())
	if err != nil {
		return nil, err
	}
	closers = append(closers, stop)
	return env, nil
}

// openMySQL opens a pool of at most maxOpen connections on cfg.
func openMySQL(cfg *mysql.Config, maxOpen int) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("-mysql-dsn: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	return db, nil
}

// countEffects is the mysql section's target.effects.
func (env *mysqlEnv) countEffects(ctx context.Context, cellID int, mode string) (rows, keys, otherMode int64, err error) {
	err = env.db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT idem_key), COALESCE(SUM(mode <> ?), 0) FROM bench_payments WHERE cell = ?",
		mode, cellID).Scan(&rows, &keys, &otherMode)
	return rows, keys, otherMode, err
}

// selectSectionModes keeps a section's baseline, its overhead route and the
// modes named that it
// has (all when names is empty); names of another section's modes are
// not an error here (-modes is checked against the server section's).
func selectSectionModes(modes []serverMode, baseline string, names []string) ([]serverMode, error) {
	if len(names) == 0 {
		return modes, nil
	}
	kept := slices.DeleteFunc(slices.Clone(modes), func(m serverMode) bool {
		return m.name != baseline && m.name != overheadMode && !slices.Contains(names, m.name)
	})
	return kept, nil
}

// sqlExecer is what a payment is inserted with in MySQL: the pool, a
// *sql.Tx.
type sqlExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// paymentMySQL is payment in MySQL: one row in bench_payments, answered with
// a body unique to the payment.
func paymentMySQL(ctx context.Context, q sqlExecer, mode string, r *http.Request, body []byte) ([]byte, error) {
	cellID, _ := strconv.Atoi(r.Header.Get(headerCell))
	id := "pay_" + uuid.NewString()
	if _, err := q.ExecContext(ctx, "INSERT INTO bench_payments (id, mode, cell, idem_key, account, amount) VALUES (?, ?, ?, ?, ?, ?)",
		id, mode, cellID, r.Header.Get(server.HeaderKey), r.Header.Get(headerAcct), 4000); err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `{"id":%q,"amount":4000,"currency":"eur","request_bytes":%d}`, id, len(body)), nil
}

// mysqlPaymentHandler inserts the payment with the execer q returns for r.
func mysqlPaymentHandler(mode string, q func(r *http.Request) sqlExecer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := paymentMySQL(r.Context(), q(r), mode, r, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeCreated(w, resp)
	})
}

func mysqlModes(db *sql.DB, store *mysqlstore.Store) ([]serverMode, error) {
	principal := func(r *http.Request) (string, error) { return r.Header.Get(headerAcct), nil }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	txMW, err := server.New(store, &server.Config{PrincipalFunc: principal, Mode: server.ModeTransactional, Logger: quiet})
	if err != nil {
		return nil, err
	}
	leaseMW, err := server.New(store, &server.Config{PrincipalFunc: principal, Mode: server.ModeLease, Logger: quiet})
	if err != nil {
		return nil, err
	}
	onTx := func(r *http.Request) sqlExecer {
		if tx, ok := mysqlstore.Tx(r.Context()); ok {
			return tx
		}
		return nil // not reached: the transactional middleware always opens one
	}
	onPool := func(*http.Request) sqlExecer { return db }
	return []serverMode{
		{name: mysqlBaseline, handler: &insertAndCatch{db: db}, replays: true},
		{name: "transactional", handler: txMW.Wrap(mysqlPaymentHandler("transactional", onTx)), replays: true},
		{name: "lease", handler: leaseMW.Wrap(mysqlPaymentHandler("lease", onPool)), replays: true},
		noopMode(),
	}, nil
}

// mysqlDuplicateKey is MySQL's ER_DUP_ENTRY.
const mysqlDuplicateKey = 1062

// insertAndCatch is the source article's hand-written idempotent POST on
// MySQL, the mysql section's baseline: in one transaction a plain INSERT of
// the key (never INSERT IGNORE), the effect, the response UPDATE, COMMIT —
// five round trips with interpolateParams. A duplicate-key error (1062)
// means the key exists: one SELECT of the stored response in the same
// transaction, then COMMIT (nothing was written).
type insertAndCatch struct{ db *sql.DB }

func (h *insertAndCatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key, principal := r.Header.Get(server.HeaderKey), r.Header.Get(headerAcct)
	if key == "" || principal == "" {
		http.Error(w, "Idempotency-Key and X-Account are required", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fp := sha256.Sum256(body)
	tx, err := h.db.BeginTx(ctx, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, "INSERT INTO handwritten_keys (principal, `key`, fingerprint, expires_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL 1 DAY)",
		principal, key, fp[:])
	if myErr := (*mysql.MySQLError)(nil); errors.As(err, &myErr) && myErr.Number == mysqlDuplicateKey {
		var (
			storedFP []byte
			status   sql.NullInt16
			stored   []byte
		)
		if err := tx.QueryRowContext(ctx, "SELECT fingerprint, status, body FROM handwritten_keys WHERE principal = ? AND `key` = ?",
			principal, key).Scan(&storedFP, &status, &stored); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		switch {
		case !bytes.Equal(storedFP, fp[:]):
			http.Error(w, "key reused with a different request", http.StatusUnprocessableEntity)
		case !status.Valid:
			http.Error(w, "in flight", http.StatusConflict) // not reached: the claim commits completed
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(wire.HeaderReplayed, "true")
			w.WriteHeader(int(status.Int16))
			_, _ = w.Write(stored)
		}
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	resp, err := paymentMySQL(ctx, tx, mysqlBaseline, r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := tx.ExecContext(ctx, "UPDATE handwritten_keys SET status = ?, body = ? WHERE principal = ? AND `key` = ?",
		http.StatusCreated, resp, principal, key); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if err := tx.Commit(); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeCreated(w, resp)
}

// runMySQL runs the mysql section, or skips it with a message when no
// MySQL DSN is set.
func runMySQL(ctx context.Context, cfg config, rep *report, progress io.Writer) error {
	if cfg.MySQLDSN == "" {
		msg := "mysql: skipped: set -mysql-dsn or IDEM_TEST_MYSQL (e.g. root@tcp(127.0.0.1:3306)/test)"
		fmt.Fprintln(progress, msg)
		rep.Skipped = append(rep.Skipped, msg)
		return nil
	}
	env, err := newMySQLEnv(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.close()
	rep.Machine.MySQL, rep.Settings.MySQLDatabase = env.version, env.database
	return runServer(ctx, cfg, &env.target, rep, progress)
}
