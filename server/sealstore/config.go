package sealstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemkit/idemkit/server"
)

// KeySize is the size of an encryption key: AES-256.
const KeySize = 32

// keyIDMaxBytes is the longest key id.
const keyIDMaxBytes = 64

// hashKeyMinBytes is the shortest Config.HashKey.
const hashKeyMinBytes = 32

// RedactFunc masks or drops parts of resp before it is stored, in place.
// resp is a copy, of the headers and body too: the first caller still gets
// the handler's response; every retry gets resp as RedactFunc left it. To
// keep no body, set resp.Body to nil and resp.BodyOmitted to true: a
// replay then sends the status and headers with an empty body and the
// header Idempotent-Response-Omitted: true.
type RedactFunc func(s server.Scope, resp *server.StoredResponse)

// OnErrorFunc is called with every stored response that could not be
// opened, after it is logged; for a metric or an alert. It runs on the
// request's goroutine, before the 503 is sent: keep it quick.
type OnErrorFunc func(ctx context.Context, err *OpenError)

// Config configures a Store.
type Config struct {
	// Keys are the AES-256 keys, KeySize bytes each, by key id: 1 to 64
	// bytes of printable ASCII without spaces, written into every row
	// (KeyID derives one from a key). The key Current names seals new
	// responses; every key opens the rows it sealed. Keep a retired key
	// until its rows have expired (one retention window): a row whose key
	// is gone does not open. Required.
	Keys map[string][]byte
	// Current is the id of the key in Keys that seals new responses.
	// Defaults to the only key's id when Keys has one key; required
	// otherwise.
	Current string
	// HashKeys stores base64url(HMAC-SHA256(HashKey, scope)) in place of
	// the client's key, so the database holds no key a client sent. An
	// operator then needs HashKey to find a record by its key (see
	// Store.StoredKey). Records written with HashKeys off are not found
	// with it on, nor the reverse: switch it only on a new store or after
	// one window. Defaults to false.
	HashKeys bool
	// HashKey is the HMAC key of HashKeys, at least 32 bytes. It must
	// never change while records live: a retry whose key hashes anew finds
	// no record and runs its handler again. Required with HashKeys.
	HashKey []byte
	// RedactFunc, when set, masks or drops parts of every response before
	// it is sealed. Defaults to nil: responses are stored whole.
	RedactFunc RedactFunc
	// AcceptPlaintext replays completed records that are not sealed, as
	// they are: set it while a store that held plaintext responses moves
	// to sealing, for one window. Defaults to false: an unsealed record is
	// undecryptable, since writing one is how a row would be forged.
	AcceptPlaintext bool
	// OnErrorFunc, when set, is called with every stored response that
	// could not be opened. Defaults to nil.
	OnErrorFunc OnErrorFunc
	// Logger receives an error for every stored response that could not
	// be opened. Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every zero field set to its
// default. It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	keys := make(map[string][]byte, len(out.Keys))
	for id, key := range out.Keys {
		keys[id] = bytes.Clone(key)
	}
	out.Keys = keys
	out.HashKey = append([]byte(nil), out.HashKey...)
	if out.Current == "" && len(out.Keys) == 1 {
		for id := range out.Keys {
			out.Current = id
		}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// validate returns an error naming the first invalid field of c.
func (c *Config) validate() error {
	const prefix = "idemkit/server/sealstore: invalid config: "
	if len(c.Keys) == 0 {
		return errors.New(prefix + "Keys is empty")
	}
	for id, key := range c.Keys {
		if err := checkKeyID(id); err != nil {
			return fmt.Errorf(prefix+"Keys: %w", err)
		}
		if len(key) != KeySize {
			return fmt.Errorf(prefix+"Keys[%q] is %d bytes, want %d (AES-256)", id, len(key), KeySize)
		}
	}
	if c.Current == "" {
		return errors.New(prefix + "Current is empty and Keys has several keys: name the key that seals new responses")
	}
	if _, ok := c.Keys[c.Current]; !ok {
		return fmt.Errorf(prefix+"Current %q is not a key id of Keys", c.Current)
	}
	if c.HashKeys && len(c.HashKey) < hashKeyMinBytes {
		return fmt.Errorf(prefix+"HashKey is %d bytes; HashKeys needs at least %d", len(c.HashKey), hashKeyMinBytes)
	}
	return nil
}

// checkKeyID returns an error if id cannot name a key in a row.
func checkKeyID(id string) error {
	if id == "" || len(id) > keyIDMaxBytes {
		return fmt.Errorf("key id %q must be 1 to %d bytes", id, keyIDMaxBytes)
	}
	for i := range len(id) {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("key id %q must be printable ASCII without spaces", id)
		}
	}
	return nil
}
