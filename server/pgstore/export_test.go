package pgstore

// WithCallerClock makes s decide leases and expiry by the times its callers
// pass instead of the database's clock, so that tests can move time. Only
// tests can call it: production stores always use the database's clock.
func WithCallerClock(s *Store) *Store {
	s.d.callerClock = true
	return s
}

// ListenerPID is the backend of s's listening connection (SubscribeChange),
// 0 while it is not listening.
func ListenerPID(s *Store) uint32 { return s.listenerPID() }
