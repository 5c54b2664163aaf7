package faultproxy

import "time"

// Record is what the proxy did with one request.
type Record struct {
	// Seq is the 1-based order in which the proxy accepted the request.
	Seq uint64
	// Method, Path and Key (the Idempotency-Key header, "" if absent)
	// describe the request.
	Method string
	Path   string
	Key    string
	// Attempt is the request's attempt number for its key (see
	// RequestInfo.Attempt).
	Attempt int
	// Action is what the proxy did.
	Action Action
	// Delay is the wait before forwarding, for ActionDelay; 0 otherwise.
	Delay time.Duration
	// Chunks is the number of body writes ActionSlowWrite splits the response
	// into (fewer happen if the client goes away); 0 otherwise.
	Chunks int
	// UpstreamStatus is the status the upstream answered; 0 if the request
	// was not forwarded or the upstream did not answer.
	UpstreamStatus int
	// Err describes what failed while forwarding or relaying (upstream
	// unreachable, client gone, proxy closed); "" if nothing did.
	Err string
}
