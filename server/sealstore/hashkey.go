package sealstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"

	"github.com/idemkit/idemkit/server"
)

// hashedKeyPrefix starts every key stored with Config.HashKeys: the
// version of the hash, and a mark an operator recognises.
const hashedKeyPrefix = "h1."

// hashKeyLabel separates the key hash from any other use of HashKey.
const hashKeyLabel = "idemkit/sealstore key v1"

// StoredKey returns the key the inner store keeps for s: s.Key itself, or,
// with Config.HashKeys, its HMAC (46 bytes, well under the longest key).
// An operator uses it to find the row of a key a client quotes.
func (s *Store) StoredKey(sc server.Scope) string {
	if !s.cfg.HashKeys {
		return sc.Key
	}
	m := hmac.New(sha256.New, s.cfg.HashKey)
	for _, part := range []string{hashKeyLabel, sc.Principal, sc.Endpoint, sc.Key} {
		writeLenPrefixed(m, part)
	}
	return hashedKeyPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// writeLenPrefixed writes the length of s (8 bytes, big endian), then s.
func writeLenPrefixed(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}
