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

// trace is what befell one keyed request on its way to its answer: its
// scope and correlation id, and what its claims met, noted by the claim
// machinery as it happens (the claim, the heartbeat, the completion, a
// release, the waiting). The Event is built from it and the answer
// (eventOf).
type trace struct {
	scope     Scope
	requestID string

	token         int64
	takenOver     bool
	claimDuration time.Duration
	released      bool
	leaseLost     int
	storeErrors   []string
	waited        time.Duration
	waitRefused   bool
}

// acquired notes the acquired claim res.
func (tr *trace) acquired(res ClaimResult) {
	tr.token, tr.takenOver = res.Token, res.TakenOver
}

// storeError notes a failed store call op.
func (tr *trace) storeError(op string) {
	tr.storeErrors = append(tr.storeErrors, op)
}

// attemptOf is the Attempt of an acquired claim.
func attemptOf(res ClaimResult) Attempt {
	a := Attempt{Token: res.Token}
	if res.TakenOver {
		a.PreviousOutcomeUnknown, a.PreviousToken = true, res.Token-1
	}
	return a
}
