package sealstore_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
)

// A row changed in the database, by one byte or one column, is never
// replayed: 503, counted, and the handler does not run.
func TestSealStore_TamperedRowNotReplayed(t *testing.T) {
	t.Parallel()
	tampers := []struct {
		name string
		do   func(t *testing.T, b *backend, key string)
	}{
		{"CiphertextByteFlipped", func(t *testing.T, b *backend, key string) {
			blob := b.rawBody(t, "alice", key)
			blob[len(blob)/2+10] ^= 0x01
			b.update(t, "UPDATE idempotency_keys SET response_body = $1 WHERE principal = 'alice' AND key = $2", blob, key)
		}},
		{"TagByteFlipped", func(t *testing.T, b *backend, key string) {
			blob := b.rawBody(t, "alice", key)
			blob[len(blob)-1] ^= 0x80
			b.update(t, "UPDATE idempotency_keys SET response_body = $1 WHERE principal = 'alice' AND key = $2", blob, key)
		}},
		{"SaltByteFlipped", func(t *testing.T, b *backend, key string) {
			blob := b.rawBody(t, "alice", key)
			blob[2+int(blob[1])] ^= 0x01
			b.update(t, "UPDATE idempotency_keys SET response_body = $1 WHERE principal = 'alice' AND key = $2", blob, key)
		}},
		{"StatusChanged", func(t *testing.T, b *backend, key string) {
			b.update(t, "UPDATE idempotency_keys SET response_status = 200 WHERE principal = 'alice' AND key = $1", key)
		}},
		{"OmittedFlagChanged", func(t *testing.T, b *backend, key string) {
			b.update(t, "UPDATE idempotency_keys SET response_body_omitted = "+b.sqlTrue()+" WHERE principal = 'alice' AND key = $1", key)
		}},
		{"PlaintextForged", func(t *testing.T, b *backend, key string) {
			b.update(t, "UPDATE idempotency_keys SET response_headers = '{}', response_body = $1 WHERE principal = 'alice' AND key = $2",
				[]byte(`{"id":"pay_forged"}`), key)
		}},
		{"BodyTruncated", func(t *testing.T, b *backend, key string) {
			blob := b.rawBody(t, "alice", key)
			b.update(t, "UPDATE idempotency_keys SET response_body = $1 WHERE principal = 'alice' AND key = $2", blob[:20], key)
		}},
	}
	forEach(t, func(t *testing.T, b *backend, mode server.Mode) {
		seen := &errorsSeen{}
		store := b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, OnErrorFunc: seen.record})
		a := newAPI(t, b, store, mode)
		for i, tc := range tampers {
			key := fmt.Sprintf("k-%d", i)
			first := a.pay(t, "alice", key)
			require.Equal(t, http.StatusCreated, first.status, "%s: body %s", tc.name, first.body)
			requireReplay(t, first, a.pay(t, "alice", key))
			tc.do(t, b, key)
			failedBefore := store.Undecryptable()
			got := a.pay(t, "alice", key)
			requireNotReplayed(t, got)
			require.NotContains(t, string(got.body), "pay_forged", tc.name)
			require.Greater(t, store.Undecryptable(), failedBefore, "%s is counted", tc.name)
			require.Equal(t, int64(i+1), a.runs.Load(), "%s: the handler ran once per key, never for the tampered row", tc.name)
		}
		require.Equal(t, store.Undecryptable(), seen.n.Load())
	})
}

// A sealed row copied under another principal, or another key of the same
// principal, does not open there: the scope is the associated data. The
// copy carries the same fingerprint, so without the seal it would replay
// alice's receipt to bob.
func TestSealStore_RowCopiedToAnotherScopeDoesNotOpen(t *testing.T) {
	t.Parallel()
	const copyRow = `INSERT INTO idempotency_keys (principal, endpoint, key, state, fingerprint, fingerprint_version, token,
		locked_until, response_status, response_headers, response_body, response_body_omitted, created_at, completed_at, expires_at)
		SELECT CAST($1 AS TEXT), endpoint, CAST($2 AS TEXT), state, fingerprint, fingerprint_version, token,
		locked_until, response_status, response_headers, response_body, response_body_omitted, created_at, completed_at, expires_at
		FROM idempotency_keys WHERE principal = $3 AND key = $4`
	for _, hashed := range []bool{false, true} {
		t.Run(fmt.Sprintf("HashKeys=%v", hashed), func(t *testing.T) {
			t.Parallel()
			forEach(t, func(t *testing.T, b *backend, mode server.Mode) {
				store := b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: hashed, HashKey: hashKey})
				a := newAPI(t, b, store, mode)
				first := a.pay(t, "alice", "k-1")
				require.Equal(t, http.StatusCreated, first.status, "body %s", first.body)
				alice := server.Scope{Principal: "alice", Endpoint: "*", Key: "k-1"}
				bob := server.Scope{Principal: "bob", Endpoint: "*", Key: "k-1"}
				other := server.Scope{Principal: "alice", Endpoint: "*", Key: "k-2"}
				for _, to := range []server.Scope{bob, other} {
					b.update(t, copyRow, to.Principal, store.StoredKey(to), alice.Principal, store.StoredKey(alice))
					got := a.pay(t, to.Principal, to.Key)
					requireNotReplayed(t, got)
				}
				require.Equal(t, int64(1), a.runs.Load())
				requireReplay(t, first, a.pay(t, "alice", "k-1"))

				// The same copy between unsealed rows replays alice's
				// receipt to bob: what the seal prevents.
				plain := newAPI(t, b, b.inner, mode)
				plainFirst := plain.pay(t, "alice", "plain-1")
				require.Equal(t, http.StatusCreated, plainFirst.status)
				b.update(t, copyRow, "bob", "plain-1", "alice", "plain-1")
				requireReplay(t, plainFirst, plain.pay(t, "bob", "plain-1"))
			})
		})
	}
}

// sqlTrue is the literal true of b's database.
func (b *backend) sqlTrue() string {
	if b.name == "SQLite" {
		return "1"
	}
	return "true"
}
