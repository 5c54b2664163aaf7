package idemkit

import (
	"errors"
	"net"
	"net/http"
)

// What one attempt's result means for its intent, given what came before:
// a pure function of the answer, the profile's reading of it, the retry
// policy's, and whether an earlier attempt's answer was lost.
//
// An answer that is not a success and not a replay speaks only for the
// attempt it answers. When an earlier attempt with the same key got no
// answer (a timeout, a reset, a process interrupted mid-attempt), that
// attempt may have reached the handler and taken effect, and an answer
// produced before the server looked the key up (a 401 for a credential
// pasted wrong, a 403, a 400 from a gateway, a proxy's error page) says
// nothing about it. Such an answer never ends the intent failed (failed
// invites a retry under a new key, which would do it twice): it ends
// StateUnknown. A 409 the profile cannot classify, after such a loss, is
// most likely the server's "a request with this key is still in progress"
// in a dialect nobody told us about: it is retried with the same key like
// the profile's in-flight answers, bounded by the horizon and
// Config.MaxAttemptsPerHour. Without a lost answer before it, a 409 may
// be a business answer ("already paid") and is left to the policy.

// attemptFacts is what judge reads.
type attemptFacts struct {
	// status is the answer's status, 0 when there was none (a transport
	// error).
	status int
	// dec is the profile's reading of the answer (classify).
	dec decision
	// policyRetry and policyErr are the retry policy's verdict
	// (Config.CheckRetry), when the profile did not decide.
	policyRetry bool
	policyErr   error
	// unanswered is the number of the first earlier attempt whose answer
	// was lost although it may have been sent, 0 if none.
	unanswered int
}

// judgment is judge's result.
type judgment struct {
	// retry: send again with the same key.
	retry bool
	// inFlight: retried because a 409 followed a lost answer.
	inFlight bool
	// state is the terminal state when retry is false.
	state IntentState
}

// judge decides what one attempt's result means (see above).
func judge(f attemptFacts) judgment {
	ok := f.status >= 200 && f.status <= 299
	switch {
	case f.dec.verdict == verdictKeyReused:
		return judgment{state: StateFailed} // about the key itself: definitive
	case f.dec.replayed && ok:
		return judgment{state: StateSucceeded}
	case f.dec.replayed:
		return judgment{state: StateFailed} // the server's stored answer to this request
	case f.dec.verdict == verdictRetry:
		return judgment{retry: true}
	case f.dec.verdict == verdictPolicy && f.policyRetry && f.policyErr == nil:
		return judgment{retry: true}
	case ok && f.policyErr == nil:
		return judgment{state: StateSucceeded}
	case f.unanswered == 0:
		return judgment{state: StateFailed}
	case f.status == http.StatusConflict && f.policyErr == nil:
		return judgment{retry: true, inFlight: true}
	}
	return judgment{state: StateUnknown}
}

// neverSent reports whether a transport error proves that the request did
// not leave this process: the connection could not be made (refused, no
// route, the name did not resolve).
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
