package server

import "time"

// What every claim is built from: the clock records are reckoned by, the
// ClaimRequest of a scope, and the Attempt the handler learns of.

// now is the time claims and records are reckoned by (Config clock, or a
// test's).
func (m *Middleware) now() time.Time { return m.timeNowFunc() }

// claimRequest is the claim of scope for a request with fingerprints fps,
// held for hold.
func (m *Middleware) claimRequest(scope Scope, fps requestFingerprint, hold time.Duration) ClaimRequest {
	now := m.now()
	fp, version := fps.current()
	return ClaimRequest{
		Scope:              scope,
		Fingerprint:        fp,
		FingerprintVersion: version,
		Now:                now,
		ExpiresAt:          now.Add(m.cfg.Window),
		LockedUntil:        now.Add(hold),
	}
}

// acquired notes the acquired claim res in ev.
func (m *Middleware) acquired(ev *Event, res ClaimResult) {
	ev.Token, ev.TakenOver = res.Token, res.TakenOver
}

// attemptOf is the Attempt of an acquired claim.
func attemptOf(res ClaimResult) Attempt {
	a := Attempt{Token: res.Token}
	if res.TakenOver {
		a.PreviousOutcomeUnknown, a.PreviousToken = true, res.Token-1
	}
	return a
}
