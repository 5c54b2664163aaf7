package faultproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idemkit/internal/faultproxy"
)

// benchmarkGet measures GET round trips against url over keep-alive
// connections.
func benchmarkGet(b *testing.B, url string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

func newBenchUpstream(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkDirect is the baseline of BenchmarkProxy_Pass: the same requests
// without the proxy.
func BenchmarkDirect(b *testing.B) {
	benchmarkGet(b, newBenchUpstream(b).URL+"/")
}

// BenchmarkProxy_Pass measures the overhead of the proxy when it injects
// nothing.
func BenchmarkProxy_Pass(b *testing.B) {
	up := newBenchUpstream(b)
	p, err := faultproxy.Start(faultproxy.Config{Upstream: up.URL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	benchmarkGet(b, p.URL()+"/")
}
