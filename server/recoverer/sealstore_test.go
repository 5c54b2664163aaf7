package recoverer

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// sealedOpener opens SQLite stores on one file, sealed with one key.
func sealedOpener(t *testing.T, cfg sealstore.Config) opener {
	sqlite := backends[0].setup(t)
	return func(t *testing.T) (server.Store, func()) {
		inner, closeFunc := sqlite(t)
		st, err := sealstore.New(inner, &cfg)
		require.NoError(t, err)
		return st, closeFunc
	}
}

// Through sealstore the recoverer lists from the inner store and claims
// and completes through the wrapper: the recovered response is sealed at
// rest and replays whole.
func TestRecoverer_ThroughSealstore(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, sealstore.KeySize)
	open := sealedOpener(t, sealstore.Config{Keys: map[string][]byte{"k1": key}})
	d := newDownstream()
	dieHolding(t, open, d, "k-sealed", "after")
	store, _ := open(t)
	var ev events
	r, err := New(store, recoverFrom(d), testConfig(&ev, nil))
	require.NoError(t, err)
	passUntil(t, r, &ev, OutcomeCompleted)

	inner := store.(*sealstore.Store).Unwrap()
	raw, err := inner.Get(t.Context(), server.Scope{Principal: "alice", Endpoint: "*", Key: "k-sealed"}, time.Now())
	require.NoError(t, err)
	require.NotContains(t, string(raw.Response.Body), "amount", "the recovered body is sealed at rest")

	api := newApp(t, store, d, nil, nil)
	retry := api.post(t, "k-sealed")
	require.Equal(t, "true", retry.header.Get(wire.HeaderReplayed))
	require.Equal(t, string(render(d.charges[server.Scope{Principal: "alice", Endpoint: "*", Key: "k-sealed"}.DownstreamKey()]).Body), string(retry.body))
}

// With hashed keys the client's key of a listed claim is gone: New says
// so rather than recover under the wrong key.
func TestNew_RefusesHashedKeys(t *testing.T) {
	t.Parallel()
	db, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	inner, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	st, err := sealstore.New(inner, &sealstore.Config{
		Keys:     map[string][]byte{"k1": bytes.Repeat([]byte{7}, sealstore.KeySize)},
		HashKeys: true, HashKey: bytes.Repeat([]byte{9}, 32),
	})
	require.NoError(t, err)
	_, err = New(st, recoverFrom(newDownstream()), nil)
	require.ErrorIs(t, err, ErrKeysHashed)
}
