package server_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
)

const (
	testTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	testTraceparent = "00-" + testTraceID + "-00f067aa0ba902b7-01"
)

func TestDefaultCorrelationID(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		traceparent []string
		requestID   string
		want        string
	}{
		{"traceparent", []string{testTraceparent}, "", testTraceID},
		{"traceparent wins over X-Request-Id", []string{testTraceparent}, "req-1", testTraceID},
		{"X-Request-Id", nil, "req-1", "req-1"},
		{"neither", nil, "", ""},
		{"all-zero trace id", []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "req-1", "req-1"},
		{"uppercase hex", []string{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}, "", ""},
		{"version ff", []string{"ff-" + testTraceID + "-00f067aa0ba902b7-01"}, "", ""},
		{"version 00 with extra field", []string{testTraceparent + "-x"}, "", ""},
		{"future version with extra field", []string{"01-" + testTraceID + "-00f067aa0ba902b7-01-x"}, "", testTraceID},
		{"short trace id", []string{"00-4bf92f35-00f067aa0ba902b7-01"}, "", ""},
		{"two traceparents", []string{testTraceparent, testTraceparent}, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			for _, v := range tt.traceparent {
				r.Header.Add("Traceparent", v)
			}
			if tt.requestID != "" {
				r.Header.Set("X-Request-Id", tt.requestID)
			}
			require.Equal(t, tt.want, server.DefaultCorrelationID(r))
		})
	}
}

// Hostile ids are never stored or sent back: only a short run of token
// characters is.
func TestCorrelationID_Validation(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"req-1":                                true,
		testTraceID:                            true,
		"6f1c2a1e-8f7e-4f41-9b0a-1c2d3e4f5a6b": true,
		"svc/a:b=c+d@e~f.g_h":                  true,
		"":                                     false,
		"a b":                                  false,
		"a\r\nSet-Cookie: x=1":                 false,
		"a;b":                                  false,
		`"quoted"`:                             false,
		"a,b":                                  false,
		"ünï":                                  false,
		strings.Repeat("a", 128):               true,
		strings.Repeat("a", 129):               false,
	} {
		require.Equal(t, want, server.ValidCorrelationIDForTest(id), "%q", id)
	}
}

// correlationKinds are the stores the correlation tests run on, plain and
// through sealstore (which encrypts the stored headers, the reserved entry
// included).
func forEachCorrelationStore(t *testing.T, f func(t *testing.T, kind string, mode server.Mode, seal bool)) {
	t.Helper()
	for _, kind := range mwStoreKinds {
		for _, mode := range mwModes {
			for _, seal := range []bool{false, true} {
				name := kind + "/" + mode.String()
				if seal {
					name += "/sealstore"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					f(t, kind, mode, seal)
				})
			}
		}
	}
}

// A replay names its original: the original request's correlation id (its
// traceparent's trace id) is stored with its response and sent on every
// replay as Idempotency-Original-Request-Id, in the replay's Event and in
// its log line, whatever the retry's own id; through sealstore too.
func TestReplay_NamesItsOriginalRequest(t *testing.T) {
	t.Parallel()
	forEachCorrelationStore(t, func(t *testing.T, kind string, mode server.Mode, seal bool) {
		logs := &lockedBuffer{}
		b := mwSetupCorrelation(t, kind, mode, seal, logs)

		first := b.post(t, map[string]string{"Traceparent": testTraceparent})
		require.Equal(t, http.StatusCreated, first.Status, "body %s", first.Body)

		again := b.post(t, map[string]string{"X-Request-Id": "retry-2"})
		require.Equal(t, http.StatusCreated, again.Status)
		require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
		require.Equal(t, testTraceID, again.Header.Get(wire.HeaderOriginalRequestID))
		require.Empty(t, again.Header.Get(server.HeaderStoredRequestIDForTest), "the reserved entry is never replayed as is")
		require.Equal(t, string(first.Body), string(again.Body))

		evs := b.eventsCopy()
		require.Len(t, evs, 2)
		require.Equal(t, testTraceID, evs[0].RequestID)
		require.Empty(t, evs[0].OriginalRequestID)
		require.Equal(t, server.OutcomeReplayed, evs[1].Outcome)
		require.Equal(t, "retry-2", evs[1].RequestID)
		require.Equal(t, testTraceID, evs[1].OriginalRequestID)
		require.Contains(t, logs.String(), "original_request_id="+testTraceID)
		require.Contains(t, logs.String(), "request_id=retry-2")
	})
}

// An invalid id (a space, a semicolon) is not stored: the replay carries no
// original id rather than a header a client sent to inject. A handler's own
// header of the reserved names is never stored either.
func TestReplay_HostileRequestIDIsNotStored(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetupCorrelation(t, kind, server.ModeLease, false, &lockedBuffer{})
		first := b.post(t, map[string]string{"X-Request-Id": "x; Set-Cookie=a"})
		require.Equal(t, http.StatusCreated, first.Status)
		again := b.post(t, nil)
		require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
		require.Empty(t, again.Header.Get(wire.HeaderOriginalRequestID))
		evs := b.eventsCopy()
		require.Empty(t, evs[0].RequestID)
		require.Empty(t, evs[1].OriginalRequestID)
	})
}

type correlationRig struct {
	srv *httptest.Server
	mu  sync.Mutex
	evs []server.Event
}

func (c *correlationRig) eventsCopy() []server.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]server.Event(nil), c.evs...)
}

func (c *correlationRig) post(t *testing.T, headers map[string]string) *mwResponse {
	t.Helper()
	h := map[string]string{"X-Principal": "alice", server.HeaderKey: "k", "Content-Type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return mwPost(t, c.srv, "/pay", h, mwBody)
}

// mwSetupCorrelation is a middleware on a fresh store of kind (sealed if
// seal) whose handler also tries to store the reserved headers itself.
func mwSetupCorrelation(t *testing.T, kind string, mode server.Mode, seal bool, logs *lockedBuffer) *correlationRig {
	t.Helper()
	st := mwNewStore(t, kind)
	store := st.store
	if seal {
		sealed, err := sealstore.New(store, &sealstore.Config{Keys: map[string][]byte{"k1": bytes.Repeat([]byte{7}, sealstore.KeySize)}})
		require.NoError(t, err)
		store = sealed
	}
	rig := &correlationRig{}
	mw, err := server.New(store, &server.Config{
		PrincipalFunc: mwPrincipal,
		Mode:          mode,
		ReplayHeaders: []string{"Content-Type", "Location", wire.HeaderOriginalRequestID, server.HeaderStoredRequestIDForTest},
		Logger:        slog.New(slog.NewTextHandler(logs, nil)),
		OnEventFunc: func(_ *http.Request, e server.Event) {
			rig.mu.Lock()
			defer rig.mu.Unlock()
			rig.evs = append(rig.evs, e)
		},
	})
	require.NoError(t, err)
	rig.srv = httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := st.insertEffect(r, "paid"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/1")
		w.Header().Set(wire.HeaderOriginalRequestID, "spoofed")
		w.Header().Set(server.HeaderStoredRequestIDForTest, "spoofed")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	})))
	t.Cleanup(rig.srv.Close)
	return rig
}
