package sealstore_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
)

// RedactFunc masks fields before the response is stored: the first caller
// gets the whole response, every retry the redacted one, and the handler
// runs once.
func TestSealStore_RedactMasksStoredResponse(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b *backend, mode server.Mode) {
		var scopes []server.Scope
		store := b.seal(t, &sealstore.Config{
			Keys: map[string][]byte{"1": key1},
			RedactFunc: func(s server.Scope, resp *server.StoredResponse) {
				scopes = append(scopes, s)
				var v map[string]any
				if json.Unmarshal(resp.Body, &v) != nil {
					return
				}
				v["card_last4"] = "****"
				delete(v, "receipt")
				resp.Body, _ = json.Marshal(v)
				resp.Header.Del("Location")
			},
		})
		a := newAPI(t, b, store, mode)
		first := a.pay(t, "alice", "k-1")
		require.Equal(t, http.StatusCreated, first.status)
		require.Contains(t, string(first.body), receiptBody, "the first caller gets the whole response")
		require.Contains(t, string(first.body), `"card_last4":"4242"`)
		require.Equal(t, receiptHeader, first.header.Get("Location"))

		replay := a.pay(t, "alice", "k-1")
		require.Equal(t, http.StatusCreated, replay.status)
		require.Equal(t, "true", replay.header.Get(wire.HeaderReplayed))
		require.NotContains(t, string(replay.body), receiptBody)
		require.Contains(t, string(replay.body), `"card_last4":"****"`)
		require.Contains(t, string(replay.body), `"id":"pay_1"`)
		require.Empty(t, replay.header.Get("Location"))
		require.Equal(t, "application/json", replay.header.Get("Content-Type"))
		require.Equal(t, int64(1), a.runs.Load())
		require.Equal(t, []server.Scope{{Principal: "alice", Endpoint: "*", Key: "k-1"}}, scopes)
	})
}

// A team that must keep no receipt drops the body: a retry gets the
// status and headers, an empty body and Idempotent-Response-Omitted: true,
// and still does not run the handler again.
func TestSealStore_RedactDropsBody(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b *backend, mode server.Mode) {
		store := b.seal(t, &sealstore.Config{
			Keys: map[string][]byte{"1": key1},
			RedactFunc: func(_ server.Scope, resp *server.StoredResponse) {
				resp.Body, resp.BodyOmitted = nil, true
			},
		})
		a := newAPI(t, b, store, mode)
		first := a.pay(t, "alice", "k-1")
		require.Equal(t, http.StatusCreated, first.status)
		require.Contains(t, string(first.body), receiptBody)

		replay := a.pay(t, "alice", "k-1")
		require.Equal(t, http.StatusCreated, replay.status)
		require.Equal(t, "true", replay.header.Get(wire.HeaderReplayed))
		require.Equal(t, "true", replay.header.Get(wire.HeaderOmitted))
		require.Empty(t, replay.body)
		require.Equal(t, receiptHeader, replay.header.Get("Location"))
		require.Equal(t, int64(1), a.runs.Load())
	})
}
