package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// A handler that writes around the middleware (here: to the router's own
// ResponseWriter, as a naive router adapter hands it) leaves the
// middleware's writer untouched. Its outcome is not stored as an empty 200
// and its key never runs again: the record is completed as
// response-not-captured, a retry gets that final problem as a replay, and
// the event says so.
func TestNotCaptured_HandlerWritingAroundTheMiddleware(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		around := http.NewServeMux()
		around.HandleFunc("POST /around", func(w http.ResponseWriter, r *http.Request) {
			// The router's writer, captured before the middleware runs.
			b.mw.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				if err := b.insertEffect(r, "around"); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				b.runs.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"paid":true}`))
			})).ServeHTTP(w, r)
		})
		first := send(t, around, "/around", "k-around")
		require.Equal(t, http.StatusCreated, first.status, "the first caller gets what the handler wrote")

		for range 2 {
			again := send(t, around, "/around", "k-around")
			require.Equal(t, http.StatusInternalServerError, again.status, "body %s", again.body)
			require.Equal(t, "true", again.header.Get(wire.HeaderReplayed), "a replay: final for the client")
			require.Contains(t, again.body, wire.ProblemType(wire.ProblemNotCaptured))
		}
		require.EqualValues(t, 1, b.runs.Load(), "never run again")
		require.Equal(t, 1, b.count(t, mwCountEffects))

		ev := b.eventsCopy()
		require.Len(t, ev, 3)
		require.True(t, ev[0].ResponseNotCaptured)
		require.Error(t, ev[0].Err)
		require.Equal(t, server.OutcomeExecuted, ev[0].Outcome)
		require.Equal(t, server.OutcomeReplayed, ev[1].Outcome)
	})
}
