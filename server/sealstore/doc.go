// Package sealstore encrypts the responses an idempotency store keeps. It
// wraps any server.Store (pgstore.Store, sqlitestore.Store, or another
// that passes the storetest suite) and is used in its place:
//
//	inner, err := pgstore.New(pool, nil)
//	key, err := sealstore.ReadKeyFile("/run/secrets/idem.key") // 64 hex digits
//	store, err := sealstore.New(inner, &sealstore.Config{
//		Keys: map[string][]byte{sealstore.KeyID(key): key},
//	})
//	m, err := server.New(store, &server.Config{PrincipalFunc: principal})
//
// A stored response inherits the sensitivity of the endpoint that produced
// it (a payment receipt, an account number): the table of idempotency
// records needs the protection of the table of payments. With this package
// a copy of the database, a backup or the SQLite file holds no response
// header or body in the clear, and, with Config.HashKeys, no client key.
//
// # What is sealed
//
// The headers and the body of each response are sealed with AES-256-GCM
// under the key Config.Current names. The status and the body-omitted flag
// stay in the clear, as the store's own columns, and are authenticated: the
// associated data binds the sealed response to its scope (principal,
// endpoint, and the caller's key), its status and its body-omitted flag, so
// a row copied under another principal or key, or given another status,
// does not open. Every row names the id of the key that sealed it, so keys
// rotate: add a new key, make it Current, and keep the old one in Keys
// until the rows it sealed have expired (one retention window).
//
// A row that does not open (an unknown key id, a byte changed, a row
// copied from another scope, an unsealed row without
// Config.AcceptPlaintext) is never replayed: the store returns an
// *OpenError, which matches ErrUndecryptable and server.ErrStoreUnavailable,
// so the middleware answers 503 store-unavailable and runs nothing. Each
// such row is logged, counted (Store.Undecryptable) and passed to
// Config.OnErrorFunc.
//
// # Stored form, version 1
//
// The inner store receives a server.StoredResponse whose Status and
// BodyOmitted are the response's, whose Header is the single marker
// "Idemkit-Sealed: 1", and whose Body is the sealed blob:
//
//	offset   size  field
//	0        1     format version, 1
//	1        1     n, the length of the key id (1 to 64)
//	2        n     key id, printable ASCII
//	2+n      16    salt, random
//	18+n     ...   AES-256-GCM ciphertext of the plaintext, then its 16-byte tag
//
// The row key is HKDF-Expand-SHA256 with the configured key as the
// pseudorandom key and "idemkit/sealstore v1 row" || salt as the info, 32
// bytes (that is, HMAC-SHA256(key, "idemkit/sealstore v1 row" || salt ||
// 0x01)), and the nonce is 12 zero bytes: every row has a key of its own,
// so the number of rows one key seals is not bounded by the 2^32 random
// nonces AES-GCM allows under one key. The associated data is
//
//	"idemkit/sealstore v1" || blob[0:18+n] || lp(principal) || lp(endpoint) || lp(key)
//	  || status (8 bytes, big endian) || body omitted (1 byte, 0 or 1)
//
// where lp(s) is the length of s (8 bytes, big endian) followed by s, and
// key is the client's key, not its HMAC. The plaintext is the header, then
// the body:
//
//	uvarint count of header names; for each name, in sorted order:
//	  uvarint length, name, uvarint count of values; for each value: uvarint length, value
//	body bytes, to the end
//
// # Hashed keys
//
// With Config.HashKeys the inner store receives, instead of the client's
// key, "h1." and the unpadded base64url of
//
//	HMAC-SHA256(HashKey, lp("idemkit/sealstore key v1") || lp(principal) || lp(endpoint) || lp(key))
//
// (46 bytes), so the database holds no key a client sent, and two
// principals' equal keys are not linkable.
// The records the store returns carry the caller's key back. The price:
// an operator can no longer find a record by the key a client quotes
// without the HMAC key (Store.StoredKey computes it), and changing
// HashKey orphans every live record, so that a retry would run its
// handler again: HashKey does not rotate.
//
// # Redaction
//
// Config.RedactFunc sees a copy of every response before it is sealed and
// may mask or drop headers and body fields, for teams that must not keep
// receipts; a retry then replays the redacted response.
package sealstore
