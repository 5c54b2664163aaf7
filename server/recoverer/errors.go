package recoverer

import "errors"

// ErrNoListing is returned by New and Start when the store cannot list its
// in-flight claims: it has no InFlight method (see Lister), nor does any
// store it wraps. redisstore.Store is such a store.
//
//	if errors.Is(err, recoverer.ErrNoListing) {
//		// recover by client retries only
//	}
var ErrNoListing = errors.New("idemkit/server/recoverer: the store cannot list its in-flight claims")

// ErrKeysHashed is returned by New and Start when the store, or a store
// it wraps, keeps a hash of each client key instead of the key
// (sealstore.Config.HashKeys): a listed claim's key cannot be turned back
// into the client's, so neither its scope nor its downstream key can be
// rebuilt, and a takeover through the wrapper would hash the hash.
var ErrKeysHashed = errors.New("idemkit/server/recoverer: the store keeps hashed keys; the client's key of a listed claim cannot be recovered")

// errNilFunc is returned by New when the RecoverFunc is nil.
var errNilFunc = errors.New("idemkit/server/recoverer: the RecoverFunc is nil")
