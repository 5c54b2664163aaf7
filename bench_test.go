package idemkit

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idemkit/internal/wire"
)

// runCallers runs b.N calls of fn spread over callers goroutines.
func runCallers(b *testing.B, callers int, fn func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	b.ResetTimer()
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := fn(int(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkSubmit measures durable Submit (one fsync per group commit) at 1
// and 32 concurrent callers, next to the baseline: a raw one-insert-per-
// transaction SQLite insert into the same table, same pragmas.
func BenchmarkSubmit(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 256)
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("idemkit/callers=%d", callers), func(b *testing.B) {
			b.ReportAllocs()
			c, err := Open(context.Background(), filepath.Join(b.TempDir(), "q.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			batches := c.q.Batches.Load()
			runCallers(b, callers, func(i int) error {
				_, err := c.Submit(context.Background(), &Request{URL: "http://127.0.0.1:1/charges", Body: body})
				return err
			})
			b.ReportMetric(float64(b.N)/float64(max(c.q.Batches.Load()-batches, 1)), "intents/fsync")
		})
		b.Run(fmt.Sprintf("baseline-raw-insert-per-tx/callers=%d", callers), func(b *testing.B) {
			b.ReportAllocs()
			path := filepath.Join(b.TempDir(), "q.db")
			c, err := Open(context.Background(), path, nil) // only to create the schema
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
			db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(8)
			fp := fingerprint("POST", "http://127.0.0.1:1/charges", body)
			runCallers(b, callers, func(i int) error {
				id := uuid.NewString()
				ts := wire.FormatTime(time.Now())
				tx, err := db.Begin()
				if err != nil {
					return err
				}
				if _, err := tx.Exec(handInsert, id, id, "POST", "http://127.0.0.1:1/charges", "http://127.0.0.1:1",
					[]byte("{}"), body, fp, ts, ts, ts, "bench", nil); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			})
		})
	}
}

// BenchmarkDo measures a durable Do round trip (persist, claim, send, record
// the outcome) against an httptest server, next to the baseline: a plain
// go-retryablehttp POST to the same server.
func BenchmarkDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	body := []byte(`{"amount":4000}`)
	b.Run("idemkit", func(b *testing.B) {
		b.ReportAllocs()
		c, err := Open(context.Background(), filepath.Join(b.TempDir(), "q.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		commits := c.q.SyncedCommits.Load()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Do(context.Background(), &Request{URL: srv.URL, Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(c.q.SyncedCommits.Load()-commits)/float64(b.N), "fsyncs/op")
	})
	b.Run("baseline-retryablehttp", func(b *testing.B) {
		b.ReportAllocs()
		rc := retryablehttp.NewClient()
		rc.Logger = nil
		defer rc.HTTPClient.CloseIdleConnections()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			req, err := retryablehttp.NewRequest(http.MethodPost, srv.URL, body)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Idempotency-Key", uuid.NewString())
			resp, err := rc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// handInsert is the hand-written INSERT the enqueue benchmark measures
// Submit against: the queue's own statement (internal/queue, sqlInsertIntent).
const handInsert = `INSERT INTO idemkit_intents
	(id, key, state, method, url, host, header, body, fingerprint, attempts, next_attempt_at, created_at, updated_at, instance, credential_headers)
	VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)
	ON CONFLICT (key) DO NOTHING
	RETURNING id`
