package sealstore_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
)

// benchResponse is a payment-sized response body.
var benchResponse = `{"id":"pay_1","object":"payment","amount":4000,"currency":"USD","status":"succeeded",` +
	`"card":{"brand":"visa","last4":"4242","exp_month":12,"exp_year":2030},"description":"order 1234",` +
	`"receipt_url":"https://example.com/receipts/pay_1","created":1764000000}`

// BenchmarkSeal measures a protected POST through the middleware on SQLite
// in transactional mode, unsealed (plain) and sealed with HashKeys
// (sealed), for a new key (claim, handler, sealed completion, commit) and
// a replay (read and open), in the same run: the ratio sealed/plain is
// the cost of encryption at rest. ratio measures it interleaved.
func BenchmarkSeal(b *testing.B) {
	for _, sealed := range []bool{false, true} {
		name := "plain"
		if sealed {
			name = "sealed"
		}
		b.Run(name, func(b *testing.B) {
			serve := newBenchAPI(b, sealed)
			i := 0 // across -count runs of newkey: every key is new
			b.Run("newkey", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					i++
					serve(b, fmt.Sprintf("new-%d", i))
				}
			})
			b.Run("replay", func(b *testing.B) {
				serve(b, "replay")
				b.ReportAllocs()
				for b.Loop() {
					serve(b, "replay")
				}
			})
		})
	}
	// On a shared machine the database's fsyncs vary more from one second
	// to the next than sealing costs: ratio alternates one plain and one
	// sealed request, each on its own store, so that both see the same
	// load, and reports each one's mean and their ratio.
	b.Run("ratio", func(b *testing.B) {
		plain, sealed := newBenchAPI(b, false), newBenchAPI(b, true)
		i := 0
		for _, kind := range []string{"newkey", "replay"} {
			b.Run(kind, func(b *testing.B) {
				key := func() string { return "replay" }
				if kind == "newkey" {
					key = func() string { i++; return fmt.Sprintf("new-%d", i) }
				} else {
					plain(b, "replay")
					sealed(b, "replay")
				}
				var plainTime, sealedTime time.Duration
				for b.Loop() {
					k := key()
					t0 := time.Now()
					plain(b, k)
					t1 := time.Now()
					sealed(b, k)
					sealedTime += time.Since(t1)
					plainTime += t1.Sub(t0)
				}
				n := float64(b.N)
				b.ReportMetric(float64(plainTime.Nanoseconds())/n, "plain-ns/req")
				b.ReportMetric(float64(sealedTime.Nanoseconds())/n, "sealed-ns/req")
				b.ReportMetric(float64(sealedTime)/float64(plainTime), "sealed/plain")
			})
		}
	})
}

// newBenchAPI returns a function that serves a protected POST with key
// through the middleware, in transactional mode, on a fresh SQLite store:
// unsealed, or sealed with HashKeys.
func newBenchAPI(b *testing.B, sealed bool) func(b *testing.B, key string) {
	be := newSQLiteBackend(b)
	store := be.inner
	if sealed {
		store = be.seal(b, &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true, HashKey: hashKey})
	}
	m, err := server.New(store, &server.Config{
		PrincipalFunc: func(*http.Request) (string, error) { return "alice", nil },
		Mode:          server.ModeTransactional,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(b, err)
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := be.effect(r); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, benchResponse)
	}))
	return func(b *testing.B, key string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount":4000,"currency":"USD"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(server.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkSealOpen measures the stored form alone: sealing and opening
// one payment-sized response.
func BenchmarkSealOpen(b *testing.B) {
	st := newUnitStore(b, nil)
	sc := sampleScope()
	resp := &server.StoredResponse{Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}}, Body: []byte(benchResponse)}
	b.Run("seal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := st.Seal(sc, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	stored, err := st.Seal(sc, resp)
	require.NoError(b, err)
	b.Run("open", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := st.Open(sc, stored); err != nil {
				b.Fatal(err)
			}
		}
	})
}
