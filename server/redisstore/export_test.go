package redisstore

// WithCallerClock makes s decide leases and expiry by the times its callers
// pass instead of Redis's TIME, so that tests can move time. Only tests can
// call it.
func WithCallerClock(s *Store) *Store {
	s.callerClock = true
	return s
}

// HeldClaims returns how many claims s holds a claim id for.
func HeldClaims(s *Store) int { return s.held.len() }

// Key returns the key of the record of sc.
var Key = (*Store).key

// ClaimScriptHash and CompleteScriptHash are the SHA1s EVALSHA sends.
var (
	ClaimScriptHash    = claimScript.Hash()
	CompleteScriptHash = completeScript.Hash()
)
