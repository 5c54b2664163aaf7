// Command bench measures what the idempotency middleware costs on a real
// HTTP round trip over loopback, next to a baseline measured in the same run.
//
// Both routes do the same work: insert one payment row in a transaction. The
// baseline route does it with raw SQL and no idempotency; the idemkit route
// wraps the same handler in server.Middleware in transactional mode, so the
// claim, the payment and the stored response commit together. A third phase
// re-sends keys that already completed, to measure replays.
//
//	go run ./bench -store sqlite -duration 5s -concurrency 8
//	go run ./bench -store postgres -dsn postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//
// Every phase is bounded by -duration and -max-requests, talks only to
// 127.0.0.1, and the program stops by itself.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/server"
)

func main() {
	var (
		storeName   = flag.String("store", "sqlite", "sqlite or postgres")
		dsn         = flag.String("dsn", os.Getenv("IDEM_TEST_POSTGRES"), "PostgreSQL DSN (with -store postgres)")
		duration    = flag.Duration("duration", 5*time.Second, "length of each phase")
		concurrency = flag.Int("concurrency", 8, "concurrent clients")
		maxRequests = flag.Int("max-requests", 200000, "upper bound of requests per phase")
		mode        = flag.String("mode", "transactional", "transactional or lease")
	)
	flag.Parse()
	if err := run(*storeName, *dsn, *mode, *duration, *concurrency, *maxRequests); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// backend abstracts the two databases for the payment insert.
type backend struct {
	store server.Store
	// baseline inserts a payment with raw SQL in its own transaction.
	baseline func(ctx context.Context, account string, amount int) error
	// insertTx inserts a payment on the middleware's transaction (or in its
	// own one in lease mode).
	insertTx func(ctx context.Context, account string, amount int) error
	close    func()
}

func run(storeName, dsn, modeName string, d time.Duration, conc, maxReq int) error {
	ctx := context.Background()
	var mode server.Mode
	switch modeName {
	case "transactional":
		mode = server.ModeTransactional
	case "lease":
		mode = server.ModeLease
	default:
		return fmt.Errorf("-mode: want transactional or lease, got %q", modeName)
	}
	var (
		be  *backend
		err error
	)
	switch storeName {
	case "sqlite":
		be, err = sqliteBackend(ctx)
	case "postgres":
		if dsn == "" {
			return errors.New("-store postgres needs -dsn or IDEM_TEST_POSTGRES")
		}
		be, err = postgresBackend(ctx, dsn)
	default:
		return fmt.Errorf("-store: want sqlite or postgres, got %q", storeName)
	}
	if err != nil {
		return err
	}
	defer be.close()

	mw, err := server.New(be.store, &server.Config{
		PrincipalFunc: func(r *http.Request) (string, error) { return r.Header.Get("X-Account"), nil },
		Mode:          mode,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	pay := func(insert func(context.Context, string, int) error) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			amount, _ := strconv.Atoi(string(bytes.TrimSpace(body)))
			if err := insert(r.Context(), r.Header.Get("X-Account"), amount); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"amount":%d}`, amount)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /baseline", pay(be.baseline))
	mux.Handle("POST /idem", mw.Wrap(pay(be.insertTx)))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc * 2}, Timeout: 30 * time.Second}
	fmt.Printf("bench: store=%s mode=%s concurrency=%d duration=%s (each phase)\n", storeName, modeName, conc, d)

	phase := func(name, path string, keyFor func(i int64) string) (*result, error) {
		return load(ctx, hc, base+path, conc, d, maxReq, keyFor)
	}
	baseline, err := phase("baseline", "/baseline", func(int64) string { return "" })
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	var firstKeys sync.Map
	fresh, err := phase("idemkit first", "/idem", func(i int64) string {
		k := uuid.NewString()
		firstKeys.Store(i, k)
		return k
	})
	if err != nil {
		return fmt.Errorf("idemkit: %w", err)
	}
	n := fresh.ok
	replay, err := phase("idemkit replay", "/idem", func(i int64) string {
		k, _ := firstKeys.Load(i % max(n, 1))
		s, _ := k.(string)
		return s
	})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	fmt.Println("| phase | requests | req/s | p50 | p99 | non-2xx |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		r    *result
	}{{"baseline: raw INSERT, no idempotency", baseline}, {"idemkit: first request " + firstWork[mode], fresh}, {"idemkit: replay of a completed key", replay}} {
		fmt.Printf("| %s | %d | %.0f | %s | %s | %d |\n", r.name, r.r.ok+r.r.bad, r.r.rate(), r.r.pct(0.50), r.r.pct(0.99), r.r.bad)
	}
	return nil
}

// firstWork says what a first request costs in each mode.
var firstWork = map[server.Mode]string{
	server.ModeTransactional: "(claim + insert + store, one tx)",
	server.ModeLease:         "(claim commit, insert, completion commit)",
}

type result struct {
	ok, bad   int64
	elapsed   time.Duration
	latencies []time.Duration
}

func (r *result) rate() float64 { return float64(r.ok+r.bad) / r.elapsed.Seconds() }

func (r *result) pct(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	return r.latencies[int(float64(len(r.latencies)-1)*p)].Round(time.Microsecond)
}

// load sends POSTs from conc goroutines until d has passed or maxReq were
// sent. Request i carries keyFor(i) as its Idempotency-Key (none if "").
func load(ctx context.Context, hc *http.Client, url string, conc int, d time.Duration, maxReq int, keyFor func(int64) string) (*result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		seq      atomic.Int64
		mu       sync.Mutex
		res      result
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lats []time.Duration
			var ok, bad int64
			defer func() {
				mu.Lock()
				res.latencies = append(res.latencies, lats...)
				res.ok += ok
				res.bad += bad
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				i := seq.Add(1) - 1
				if i >= int64(maxReq) {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte("4000")))
				req.Header.Set("X-Account", "acct_"+strconv.FormatInt(i%16, 10))
				if k := keyFor(i); k != "" {
					req.Header.Set("Idempotency-Key", k)
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lats = append(lats, time.Since(t0))
				if resp.StatusCode/100 == 2 {
					ok++
				} else {
					bad++
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.latencies)
	return &res, firstErr
}

const paymentsSQLite = `CREATE TABLE IF NOT EXISTS bench_payments (
  id TEXT PRIMARY KEY, account TEXT NOT NULL, amount INTEGER NOT NULL, created_at TEXT NOT NULL) STRICT`

func sqliteBackend(ctx context.Context) (*backend, error) {
	dir, err := os.MkdirTemp("", "idemkit-bench-")
	if err != nil {
		return nil, err
	}
	db, err := server.OpenSQLite(ctx, filepath.Join(dir, "bench.db"))
	if err != nil {
		return nil, err
	}
	st, err := server.NewSQLiteStore(db, nil)
	if err != nil {
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, paymentsSQLite); err != nil {
		return nil, err
	}
	const ins = `INSERT INTO bench_payments (id, account, amount, created_at) VALUES (?, ?, ?, ?)`
	exec := func(ctx context.Context, q interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, account string, amount int) error {
		_, err := q.ExecContext(ctx, ins, uuid.NewString(), account, amount, time.Now().UTC().Format(time.RFC3339Nano))
		return err
	}
	own := func(ctx context.Context, account string, amount int) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := exec(ctx, tx, account, amount); err != nil {
			return err
		}
		return tx.Commit()
	}
	return &backend{
		store:    st,
		baseline: own,
		insertTx: func(ctx context.Context, account string, amount int) error {
			if tx, ok := server.SQLTx(ctx); ok {
				return exec(ctx, tx, account, amount)
			}
			return own(ctx, account, amount)
		},
		close: func() { db.Close(); os.RemoveAll(dir) },
	}, nil
}

func postgresBackend(ctx context.Context, dsn string) (*backend, error) {
	schema := "idemkit_bench_" + uuid.NewString()[:8]
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	drop := func() {
		pool.Close()
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	}
	st, err := server.NewPostgresStore(pool, nil)
	if err != nil {
		drop()
		return nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		drop()
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_payments (
	  id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		drop()
		return nil, err
	}
	const ins = `INSERT INTO bench_payments (id, account, amount) VALUES ($1, $2, $3)`
	own := func(ctx context.Context, account string, amount int) error {
		_, err := pool.Exec(ctx, ins, uuid.NewString(), account, amount)
		return err
	}
	return &backend{
		store:    st,
		baseline: own,
		insertTx: func(ctx context.Context, account string, amount int) error {
			if tx, ok := server.PgxTx(ctx); ok {
				_, err := tx.Exec(ctx, ins, uuid.NewString(), account, amount)
				return err
			}
			return own(ctx, account, amount)
		},
		close: drop,
	}, nil
}
