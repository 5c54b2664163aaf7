package sealstore_test

import (
	"bytes"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// clientKey is a key a client sends; with HashKeys it must not be found
// at rest.
const clientKey = "client-key-PLAINTEXT-7f3a9c"

// secrets are the plaintexts that must not be found at rest.
var secrets = []string{receiptBody, receiptHeader, clientKey}

// What a copy of the SQLite file holds, with sealing and HashKeys: the
// database file and its WAL (where recent writes live until a checkpoint)
// contain no body, no replayable header value and no client key. The same
// requests on the unsealed store leave all three in the files: the grep
// finds what is there.
func TestSealStore_SQLiteFileHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	for _, sealed := range []bool{true, false} {
		name := "Sealed"
		if !sealed {
			name = "Unsealed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newSQLiteBackend(t)
			store := b.inner
			if sealed {
				store = b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true, HashKey: hashKey})
			}
			payAndReplay(t, b, store)
			files := readFiles(t, b.path, b.path+"-wal")
			for _, s := range secrets {
				if sealed {
					require.False(t, bytes.Contains(files, []byte(s)), "%q found in the SQLite file or its WAL", s)
				} else {
					require.True(t, bytes.Contains(files, []byte(s)), "control: %q not found in the unsealed SQLite file", s)
				}
			}
		})
	}
}

// What the PostgreSQL table holds, with sealing and HashKeys: no column
// of any row contains a body, a replayable header value or a client key.
func TestSealStore_PostgresTableHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	for _, sealed := range []bool{true, false} {
		name := "Sealed"
		if !sealed {
			name = "Unsealed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newPostgresBackend(t)
			store := b.inner
			if sealed {
				store = b.seal(t, &sealstore.Config{Keys: map[string][]byte{"1": key1}, HashKeys: true, HashKey: hashKey})
			}
			payAndReplay(t, b, store)
			// Every column of every row, as text (bytea in hex, so the
			// body is compared in hex too).
			table, err := b.queryBytes(storetest.Context(t),
				"SELECT convert_to(string_agg(t::text || encode(response_body, 'hex'), '|'), 'UTF8') FROM idempotency_keys t")
			require.NoError(t, err)
			table = bytes.ToLower(table)
			for _, s := range secrets {
				found := bytes.Contains(table, bytes.ToLower([]byte(s))) || bytes.Contains(table, []byte(hexOf(s)))
				require.Equal(t, !sealed, found, "%q in the table: got %v", s, found)
			}
		})
	}
}

// payAndReplay pays three times with clientKey's family of keys and
// replays each once, through a real middleware in transactional mode.
func payAndReplay(t *testing.T, b *backend, store server.Store) {
	t.Helper()
	a := newAPI(t, b, store, server.ModeTransactional)
	for _, key := range []string{clientKey, clientKey + "-2", clientKey + "-3"} {
		first := a.pay(t, "alice", key)
		require.Equal(t, http.StatusCreated, first.status, "body %s", first.body)
		require.Contains(t, string(first.body), receiptBody)
		requireReplay(t, first, a.pay(t, "alice", key))
	}
}

// readFiles returns the concatenated bytes of the files at paths.
func readFiles(t *testing.T, paths ...string) []byte {
	t.Helper()
	var all []byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		all = append(all, b...)
	}
	return all
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(s))
	for i := range len(s) {
		out = append(out, digits[s[i]>>4], digits[s[i]&0xf])
	}
	return string(out)
}
