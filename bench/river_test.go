package main

// The river section: idemriver (intents as River jobs) side by side with
// River alone and a hand-written outbox INSERT, on one PostgreSQL schema per
// benchmark. Go benchmarks rather than harness cells (they need no server
// section); run them with a short -benchtime (see BENCHMARKS.md, "River
// backend"):
//
//	IDEM_TEST_POSTGRES=... go test ./bench -run '^$' -bench 'River' -benchtime 2000x -count 3
//
// Enqueue: one business write (an order row) and its intent in the caller's
// transaction, at 1, 8 and 32 concurrent callers:
//
//   - idemriver: Client.SubmitTx (validates the request, mints the key, the
//     River insert);
//   - river: River's InsertTx of a job with the same args (the request and a
//     key minted by the caller): River's own cost, the baseline;
//   - insert: a hand-written INSERT of the same columns into an outbox table.
//
// Drain: b.N intents queued before the timer starts, then sent to a loopback
// API answering 201, by 1 and by 3 Clients (instances) of 16 workers each,
// until every job is finalized:
//
//   - idemriver: its worker (attempt recorded before the send, the policy's
//     decision, the outcome recorded on the job);
//   - river: a River worker doing the same HTTP POST with the key from its
//     args and completing the job (no contract).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testpg"
)

// plainArgs is the River-alone job: the same fields as an intent's args.
type plainArgs struct {
	ID     string      `json:"id"`
	Key    string      `json:"key"`
	Method string      `json:"method"`
	URL    string      `json:"url"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

func (plainArgs) Kind() string { return "bench_plain_post" }

// plainWorker sends the POST with the key from its args and completes.
type plainWorker struct {
	river.WorkerDefaults[plainArgs]
	hc *http.Client
}

func (w *plainWorker) Work(ctx context.Context, job *river.Job[plainArgs]) error {
	a := job.Args
	req, err := http.NewRequestWithContext(ctx, a.Method, a.URL, bytes.NewReader(a.Body))
	if err != nil {
		return err
	}
	req.Header = a.Header.Clone()
	req.Header.Set("Idempotency-Key", a.Key)
	resp, err := w.hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

var benchBody = []byte(`{"amount": 4000, "currency": "EUR", "description": "order"}`)

type riverBench struct {
	pool *pgxpool.Pool
	api  *httptest.Server
}

func setupRiverBench(b *testing.B, poolSize int32) *riverBench {
	b.Helper()
	dsn := testpg.SchemaDSN(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := idemriver.Migrate(ctx, pool, ""); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id uuid PRIMARY KEY, amount bigint NOT NULL);
		CREATE TABLE outbox (id uuid PRIMARY KEY, key text NOT NULL UNIQUE, method text NOT NULL, url text NOT NULL,
			header jsonb NOT NULL, body bytea NOT NULL, state text NOT NULL DEFAULT 'pending', created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		b.Fatal(err)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
	b.Cleanup(api.Close)
	return &riverBench{pool: pool, api: api}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newPlainRiver(pool *pgxpool.Pool, workers int, hc *http.Client) (*river.Client[pgx.Tx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &plainWorker{hc: hc})
	cfg := &river.Config{Workers: ws, Logger: quietLogger(), FetchPollInterval: 50 * time.Millisecond, FetchCooldown: 50 * time.Millisecond}
	if workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// BenchmarkRiverEnqueue: an order and its intent in one transaction.
func BenchmarkRiverEnqueue(b *testing.B) {
	for _, callers := range []int{1, 8, 32} {
		for _, mode := range []string{"idemriver", "river", "insert"} {
			b.Run(fmt.Sprintf("%s/callers-%d", mode, callers), func(b *testing.B) {
				rb := setupRiverBench(b, int32(min(callers, 32)+2))
				ctx := context.Background()
				ic, err := idemriver.NewClient(rb.pool, &idemriver.Config{Logger: quietLogger()})
				if err != nil {
					b.Fatal(err)
				}
				rc, err := newPlainRiver(rb.pool, 0, nil)
				if err != nil {
					b.Fatal(err)
				}
				url := rb.api.URL + "/v1/payments"
				header := http.Header{"Content-Type": {"application/json"}}
				enqueue := map[string]func(tx pgx.Tx) error{
					"idemriver": func(tx pgx.Tx) error {
						_, err := ic.SubmitTx(ctx, tx, &idemriver.Request{URL: url, Header: header, Body: benchBody})
						return err
					},
					"river": func(tx pgx.Tx) error {
						id, err := uuid.NewV7()
						if err != nil {
							return err
						}
						_, err = rc.InsertTx(ctx, tx, plainArgs{ID: id.String(), Key: id.String(), Method: http.MethodPost, URL: url, Header: header, Body: benchBody}, nil)
						return err
					},
					"insert": func(tx pgx.Tx) error {
						id, err := uuid.NewV7()
						if err != nil {
							return err
						}
						h, _ := json.Marshal(header)
						_, err = tx.Exec(ctx, `INSERT INTO outbox (id, key, method, url, header, body) VALUES ($1, $2, $3, $4, $5, $6)`,
							id, id.String(), http.MethodPost, url, h, benchBody)
						return err
					},
				}[mode]
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				errs := make(chan error, callers)
				per := (b.N + callers - 1) / callers
				start := time.Now()
				for c := range callers {
					n := min(per, b.N-c*per)
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							err := pgx.BeginFunc(ctx, rb.pool, func(tx pgx.Tx) error {
								if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, 4000)`, uuid.New()); err != nil {
									return err
								}
								return enqueue(tx)
							})
							if err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueues/s")
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				var orders, queued int
				_ = rb.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM river_job) + (SELECT count(*) FROM outbox)`).Scan(&orders, &queued)
				if orders != b.N || queued != b.N {
					b.Fatalf("%d orders and %d queued after %d enqueues", orders, queued, b.N)
				}
			})
		}
	}
}

// BenchmarkRiverDrain: b.N queued POSTs sent by 1 or 3 instances.
func BenchmarkRiverDrain(b *testing.B) {
	for _, instances := range []int{1, 3} {
		for _, mode := range []string{"idemriver", "river"} {
			b.Run(fmt.Sprintf("%s/instances-%d", mode, instances), func(b *testing.B) {
				rb := setupRiverBench(b, int32(8*instances+2))
				ctx := context.Background()
				hc := &http.Client{Timeout: 10 * time.Second}
				url := rb.api.URL + "/v1/payments"
				header := http.Header{"Content-Type": {"application/json"}}

				// Queue b.N jobs, then start the instances and time the drain.
				var starts []func() error
				var stops []func()
				if mode == "idemriver" {
					ic, err := idemriver.NewClient(rb.pool, &idemriver.Config{Logger: quietLogger()})
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < b.N; i += 500 {
						err := pgx.BeginFunc(ctx, rb.pool, func(tx pgx.Tx) error {
							for j := i; j < min(i+500, b.N); j++ {
								if _, err := ic.SubmitTx(ctx, tx, &idemriver.Request{URL: url, Header: header, Body: benchBody}); err != nil {
									return err
								}
							}
							return nil
						})
						if err != nil {
							b.Fatal(err)
						}
					}
					for range instances {
						c, err := idemriver.NewClient(rb.pool, &idemriver.Config{Logger: quietLogger(), MaxWorkers: 16, HTTPClient: hc, FetchPollInterval: 50 * time.Millisecond})
						if err != nil {
							b.Fatal(err)
						}
						starts = append(starts, func() error { return c.Start(ctx) })
						stops = append(stops, func() { _ = c.Stop(context.Background()) })
					}
				} else {
					ins, err := newPlainRiver(rb.pool, 0, nil)
					if err != nil {
						b.Fatal(err)
					}
					params := make([]river.InsertManyParams, 0, b.N)
					for range b.N {
						id := uuid.Must(uuid.NewV7()).String()
						params = append(params, river.InsertManyParams{Args: plainArgs{ID: id, Key: id, Method: http.MethodPost, URL: url, Header: header, Body: benchBody}})
					}
					if _, err := ins.InsertManyFast(ctx, params); err != nil {
						b.Fatal(err)
					}
					for range instances {
						c, err := newPlainRiver(rb.pool, 16, hc)
						if err != nil {
							b.Fatal(err)
						}
						starts = append(starts, func() error { return c.Start(ctx) })
						stops = append(stops, func() { _ = c.Stop(context.Background()) })
					}
				}
				b.ResetTimer()
				start := time.Now()
				for _, s := range starts {
					if err := s(); err != nil {
						b.Fatal(err)
					}
				}
				for {
					var left int
					if err := rb.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE finalized_at IS NULL`).Scan(&left); err != nil {
						b.Fatal(err)
					}
					if left == 0 {
						break
					}
					time.Sleep(5 * time.Millisecond) // polling the count; the bound of the measurement's error
				}
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "intents/s")
				for _, s := range stops {
					s()
				}
				hc.CloseIdleConnections()
				var completed int
				_ = rb.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed)
				if completed != b.N {
					b.Fatalf("%d of %d jobs completed", completed, b.N)
				}
			})
		}
	}
}
