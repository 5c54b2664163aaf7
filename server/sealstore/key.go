package sealstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
)

// ParseKey decodes a key written as 2*KeySize hexadecimal digits, with
// surrounding white space (a trailing newline) ignored.
func ParseKey(text []byte) ([]byte, error) {
	text = bytes.TrimSpace(text)
	if len(text) != 2*KeySize {
		return nil, fmt.Errorf("idemkit/server/sealstore: a key is %d hexadecimal digits, got %d characters", 2*KeySize, len(text))
	}
	key := make([]byte, KeySize)
	if _, err := hex.Decode(key, text); err != nil {
		return nil, fmt.Errorf("idemkit/server/sealstore: a key is %d hexadecimal digits: %w", 2*KeySize, err)
	}
	return key, nil
}

// ReadKeyFile reads a key written as 2*KeySize hexadecimal digits (see
// ParseKey) from the file at path, for example one made with
//
//	openssl rand -hex 32 > idem.key
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("idemkit/server/sealstore: read key file: %w", err)
	}
	key, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return key, nil
}

// KeyID returns an id for key that names it without revealing it: "k"
// and the first 8 bytes of a SHA-256 of the key, in hex. Two processes
// given the same key file agree on its id, so a key can be rotated by
// giving the new file and keeping the old one, without naming ids.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("idemkit/sealstore key id\x00"))
	h.Write(key)
	return "k" + hex.EncodeToString(h.Sum(nil)[:8])
}
