package conform_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/conform"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/wire"
)

// Over HTTPS too, the hostile keys go out byte for byte (on connections of
// their own, with the configured transport's TLS settings) and are judged.
func TestRun_HostileKeysOverTLS(t *testing.T) {
	t.Parallel()
	var n, hostile atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if _, err := wire.ParseKey(r.Header.Values(wire.HeaderKey)); err != nil {
			hostile.Add(1)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"%d"}`, n.Add(1))
	}))
	t.Cleanup(srv.Close)
	cfg := config(srv.URL, "idemkit")
	cfg.Transport = srv.Client().Transport
	rep, err := conform.Run(testkit.Ctx(t), cfg)
	require.NoError(t, err)
	res, ok := rep.Result(conform.PropHostileKeys)
	require.True(t, ok)
	require.Equal(t, conform.Pass, res.Verdict, res.Reason)
	// The key with a control character is refused by net/http itself.
	require.Equal(t, int32(3), hostile.Load())
}
