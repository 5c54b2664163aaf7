package server_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// scopeRig serves one route whose principal and operation name come from
// percent-encoded headers, so a test can send any bytes.
func scopeRig(t *testing.T, kind string, mode server.Mode) (*mwStore, *httptest.Server, *atomic.Int64) {
	t.Helper()
	s := mwNewStore(t, kind)
	mw, err := server.New(s.store, &server.Config{
		Mode: mode,
		PrincipalFunc: func(r *http.Request) (string, error) {
			return url.QueryUnescape(r.Header.Get("X-Principal"))
		},
		EndpointFunc: func(r *http.Request) string {
			op, _ := url.QueryUnescape(r.Header.Get("X-Operation"))
			return op
		},
	})
	require.NoError(t, err)
	var runs atomic.Int64
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	return s, srv, &runs
}

func postScoped(t *testing.T, srv *httptest.Server, principal, operation string) *mwResponse {
	t.Helper()
	return mwPost(t, srv, "/x", map[string]string{
		"X-Principal": url.QueryEscape(principal), "X-Operation": url.QueryEscape(operation), server.HeaderKey: "k",
	}, "{}")
}

// A principal or an operation name with NUL, invalid UTF-8 or over the
// length bound is a deterministic client-visible error (401/400), the same
// on both stores, before the store is asked: never a retryable 503, never a
// handler run.
func TestScope_InvalidPrincipalOrEndpointRejectedBeforeStore(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		s, srv, runs := scopeRig(t, kind, mode)
		long := strings.Repeat("p", server.MaxScopePartBytesForTest+1)
		for _, bad := range []string{"acct\x00evil", "acct\xff", long, "acct\x1b"} {
			postScoped(t, srv, bad, "").requireProblem(t, http.StatusUnauthorized, wire.ProblemPrincipalInvalid)
			postScoped(t, srv, "acct_1", bad).requireProblem(t, http.StatusBadRequest, wire.ProblemEndpointInvalid)
		}
		require.Zero(t, runs.Load())
		require.Zero(t, s.count(t, mwCountRecords))

		// The bound is inclusive, and distinct principals stay distinct.
		require.Equal(t, http.StatusCreated, postScoped(t, srv, long[:server.MaxScopePartBytesForTest], "").Status)
		require.Equal(t, http.StatusCreated, postScoped(t, srv, long[:server.MaxScopePartBytesForTest-1], "").Status)
		require.EqualValues(t, 2, runs.Load())
	})
}

// Transient statuses (408, 409, 425, 429), 404/405 and responses the
// handler marks with MarkNotStored are sent but not stored: the retry runs
// the handler again instead of replaying the refusal.
func TestOutcome_NotStoredResponsesFreeTheKey(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		var runs atomic.Int64
		first := []func(w http.ResponseWriter, r *http.Request){
			func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) },
			func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusConflict) },
			func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusRequestTimeout) },
			func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooEarly) },
			func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
			func(w http.ResponseWriter, r *http.Request) {
				server.MarkNotStored(r.Context())
				http.Error(w, "amount is required", http.StatusBadRequest)
			},
		}
		srv := httptest.NewServer(b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if n%2 == 1 {
				first[(n-1)/2](w, r)
				return
			}
			if err := b.insertEffect(r, "ok"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})))
		t.Cleanup(srv.Close)
		b.srv = srv
		for i := range first {
			key := "k" + string(rune('a'+i))
			res := b.do(t, mwReq{principal: "alice", keys: []string{key}, body: mwBody})
			require.NotEqual(t, http.StatusCreated, res.Status)
			require.Empty(t, res.Header.Get(wire.HeaderReplayed))
			res = b.do(t, mwReq{principal: "alice", keys: []string{key}, body: mwBody})
			require.Equal(t, http.StatusCreated, res.Status, "case %d: the retry runs the handler", i)
		}
		require.EqualValues(t, 2*len(first), runs.Load())
		require.Equal(t, len(first), b.count(t, mwCountRecords), "only the 201s are stored")
		var notStored int
		for _, e := range b.eventsCopy() {
			if e.Outcome == server.OutcomeReleased && e.Status < 500 {
				notStored++
			}
		}
		require.Equal(t, len(first), notStored)
	})
}
