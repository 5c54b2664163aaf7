// Package redact hides identifiers an operator's tools print or log: an
// idempotency key and a principal become a short, stable hash, so that one
// request's log lines, metrics and `idemkit store inflight` rows can be
// matched with each other without showing the values.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
)

// Hash returns "sha256:" and the first 16 hex digits of the SHA-256 of s:
// stable across processes and releases, so that the same value hashes the
// same in the logs and in the CLI. It hides a value from a casual reader,
// not from a dictionary attack on a guessable one (an account name).
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	var out [len(hashPrefix) + 16]byte
	copy(out[:], hashPrefix)
	hex.Encode(out[len(hashPrefix):], sum[:8])
	return string(out[:])
}

const hashPrefix = "sha256:"
