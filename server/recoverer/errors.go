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

// errNilFunc is returned by New when the RecoverFunc is nil.
var errNilFunc = errors.New("idemkit/server/recoverer: the RecoverFunc is nil")
