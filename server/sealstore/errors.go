package sealstore

import (
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/server"
)

// ErrUndecryptable means a stored response could not be opened: its key
// id is not in Config.Keys, it was changed or copied from another scope, or
// it is not sealed. The response is not replayed; the middleware answers
// 503 store-unavailable. Every error the Store returns for such a row is
// an *OpenError matching it:
//
//	if errors.Is(err, sealstore.ErrUndecryptable) { ... }
var ErrUndecryptable = errors.New("idemkit/server/sealstore: stored response cannot be decrypted")

// Causes carried by OpenError.Err.
var (
	// errUnknownKey: the row names a key id that Config.Keys lacks (a key
	// removed before the rows it sealed expired).
	errUnknownKey = errors.New("the key id the row names is not configured")
	// errNotSealed: the row has no seal marker, and Config.AcceptPlaintext
	// is off.
	errNotSealed = errors.New("the stored response is not sealed")
	// errFormat: the sealed blob or its plaintext is malformed.
	errFormat = errors.New("malformed sealed response")
	// errAuth: the tag does not verify: a changed byte, or a row copied
	// from another scope, status or key.
	errAuth = errors.New("message authentication failed: the row was changed or belongs to another scope")
)

// OpenError is the error for a stored response that could not be opened.
// It matches ErrUndecryptable and server.ErrStoreUnavailable (so the
// middleware answers 503 and never replays it) and wraps its cause.
type OpenError struct {
	// Scope is the scope the caller asked for, with the client's key.
	Scope server.Scope
	// KeyID is the key id the row names; empty when the blob is too
	// malformed to name one.
	KeyID string
	// Err is why the row did not open.
	Err error
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("%v: principal %q, endpoint %q, key id %q: %v", ErrUndecryptable, e.Scope.Principal, e.Scope.Endpoint, e.KeyID, e.Err)
}

// Unwrap returns ErrUndecryptable, server.ErrStoreUnavailable and the cause.
func (e *OpenError) Unwrap() []error {
	return []error{ErrUndecryptable, server.ErrStoreUnavailable, e.Err}
}
