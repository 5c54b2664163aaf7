package sealstore_test

import (
	"testing"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// The sealed store keeps the whole store contract, with the client's key
// or its HMAC stored, on each database.
func TestSealStore_Conformance(t *testing.T) {
	t.Parallel()
	for _, name := range backends {
		for _, hashed := range []bool{false, true} {
			sub := name
			if hashed {
				sub += "/HashedKeys"
			}
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				storetest.Run(t, func(t *testing.T) server.Store {
					return newBackend(t, name).seal(t, &sealstore.Config{
						Keys:     map[string][]byte{"1": key1},
						HashKeys: hashed, HashKey: hashKey,
					})
				})
			})
		}
	}
}
