package sealstore_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// Rotation: rows sealed under key 1 replay once key 2 is current, new
// rows are sealed under key 2, and once key 1 is removed the rows it
// sealed are never replayed: 503, logged, counted, and the handler does
// not run either.
func TestSealStore_RotationOldKeysOpenRemovedKeysRefuse(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, b *backend, mode server.Mode) {
		ctx := storetest.Context(t)
		before := newAPI(t, b, b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}}), mode)
		first := before.pay(t, "alice", "k-1")
		require.Equal(t, http.StatusCreated, first.status, "body %s", first.body)
		require.Equal(t, "1", keyIDOf(b.rawBody(t, "alice", "k-1")))

		rotated := newAPI(t, b, b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1, "2": key2}, Current: "2"}), mode)
		requireReplay(t, first, rotated.pay(t, "alice", "k-1"))
		second := rotated.pay(t, "alice", "k-2")
		require.Equal(t, http.StatusCreated, second.status, "body %s", second.body)
		require.Equal(t, "2", keyIDOf(b.rawBody(t, "alice", "k-2")), "the current key seals new rows")

		seen := &errorsSeen{}
		var log testkit.SyncBuffer
		retiredStore := b.seal(t, &sealstore.Config{Keys: map[string][]byte{"2": key2}, OnErrorFunc: seen.record,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		retired := newAPI(t, b, retiredStore, mode)
		requireNotReplayed(t, retired.pay(t, "alice", "k-1"))
		requireReplay(t, second, retired.pay(t, "alice", "k-2"))

		require.Equal(t, int64(1), before.runs.Load())
		require.Equal(t, int64(1), rotated.runs.Load())
		require.Zero(t, retired.runs.Load(), "a row that does not open is not run again either")
		require.Positive(t, retiredStore.Undecryptable())
		require.Equal(t, retiredStore.Undecryptable(), seen.n.Load(), "every failure reaches OnErrorFunc")
		require.Contains(t, log.String(), `level=ERROR msg="idemkit: stored response cannot be opened; not replayed"`)
		require.Contains(t, log.String(), "principal=alice")
		require.Contains(t, log.String(), "key_id=1")
		oe := seen.last.Load()
		require.ErrorIs(t, oe, sealstore.ErrUndecryptable)
		require.ErrorIs(t, oe, server.ErrStoreUnavailable)
		require.Equal(t, "1", oe.KeyID)
		require.Equal(t, server.Scope{Principal: "alice", Endpoint: "*", Key: "k-1"}, oe.Scope)
		if mode == server.ModeTransactional {
			n, err := b.effects(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, n, "one effect per key, written through the inner store's Handle")
		}
	})
}

// keyIDOf returns the key id a sealed blob names.
func keyIDOf(blob []byte) string {
	if len(blob) < 2 || len(blob) < 2+int(blob[1]) {
		return ""
	}
	return string(blob[2 : 2+int(blob[1])])
}
