package server_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// BenchmarkMiddleware measures a protected POST (first request: claim,
// handler, store; replay: one claim statement that finds the stored
// response) against the same handler unprotected (Baseline: one raw INSERT),
// on each store, in the same run.
func BenchmarkMiddleware(b *testing.B) {
	for _, kind := range mwStoreKinds {
		b.Run(kind, func(b *testing.B) {
			st := mwNewStore(b, kind)
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if err := st.insertEffect(r, string(body)); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, `{"id":"pay_123","status":"succeeded"}`)
			})
			mux := http.NewServeMux()
			mux.Handle("POST /raw", handler)
			for _, mode := range mwModes {
				m, err := server.New(st.store, &server.Config{
					PrincipalFunc: mwPrincipal, Mode: mode,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				})
				require.NoError(b, err)
				mux.Handle("POST /"+mode.String(), m.Wrap(handler))
			}
			serve := func(b *testing.B, path, key string) {
				req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(mwBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Principal", "alice")
				if key != "" {
					req.Header.Set(server.HeaderKey, key)
				}
				w := httptest.NewRecorder()
				mux.ServeHTTP(w, req)
				if w.Code != http.StatusCreated {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}

			b.Run("Baseline/RawInsert", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					serve(b, "/raw", "")
				}
			})
			for _, mode := range mwModes {
				path := "/" + mode.String()
				b.Run(mode.String()+"/First", func(b *testing.B) {
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						i++
						serve(b, path, fmt.Sprintf("%s-first-%d", mode, i))
					}
				})
				b.Run(mode.String()+"/Replay", func(b *testing.B) {
					// Keys are per mode: the two modes share the principal's
					// keys, and a key reused on the other route is a 422.
					key := mode.String() + "-replay"
					serve(b, path, key)
					b.ReportAllocs()
					for b.Loop() {
						serve(b, path, key)
					}
				})
			}
		})
	}
}

func BenchmarkParseKey(b *testing.B) {
	h := []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.ParseKey(h); err != nil {
			b.Fatal(err)
		}
	}
}
