package sealstore_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
)

// A store that held plaintext responses moves to sealing: by default an
// unsealed row is refused like a forged one; with AcceptPlaintext it
// replays, while new rows are sealed.
func TestSealStore_PlaintextRowsOnlyWithAcceptPlaintext(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b *backend, mode server.Mode) {
		plain := newAPI(t, b, b.inner, mode)
		first := plain.pay(t, "alice", "old")
		require.Equal(t, http.StatusCreated, first.status)

		strict := newAPI(t, b, b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}}), mode)
		requireNotReplayed(t, strict.pay(t, "alice", "old"))

		moving := newAPI(t, b, b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, AcceptPlaintext: true}), mode)
		requireReplay(t, first, moving.pay(t, "alice", "old"))
		fresh := moving.pay(t, "alice", "new")
		require.Equal(t, http.StatusCreated, fresh.status)
		require.Equal(t, "1", keyIDOf(b.rawBody(t, "alice", "new")), "new rows are sealed")
		requireReplay(t, fresh, strict.pay(t, "alice", "new"))
		require.Zero(t, strict.runs.Load())
	})
}
