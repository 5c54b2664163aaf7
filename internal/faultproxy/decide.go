package faultproxy

import (
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// Mode says what the seeded decision for a request is a function of.
type Mode string

const (
	// ModeSequence keys each decision by (Seed, N), N being the 1-based
	// order in which the proxy accepted the request. Exact replay needs
	// requests to arrive in the same order, i.e. one at a time.
	ModeSequence Mode = "sequence"
	// ModeKeyed keys each decision by (Seed, identity, attempt): identity
	// is the Idempotency-Key header (bare and RFC 8941 quoted spellings
	// are the same key), or "METHOD path" for a request without one, and
	// attempt counts this proxy's requests with that identity from 1.
	// Replay does not depend on interleaving. The identity is the key
	// alone: two principals sending the same key share one attempt count.
	ModeKeyed Mode = "keyed"
)

// RequestInfo identifies a request to a decision.
type RequestInfo struct {
	// Seq is the 1-based order in which the proxy accepted the request.
	Seq uint64
	// Method and Path are the request's method and URL path.
	Method string
	Path   string
	// Key is the Idempotency-Key header, "" if absent.
	Key string
	// Attempt is the 1-based count of requests with this Key (or, without
	// a key, this "METHOD path") the proxy has accepted, this one included.
	Attempt int
}

// DecideFunc chooses the action for one request. It is called concurrently
// and must be safe for that.
type DecideFunc func(info RequestInfo) Action

// decision is the outcome of the seeded draw for one request.
type decision struct {
	action Action
	delay  time.Duration // for ActionDelay
}

// stream returns the 64-bit stream selector of a request under mode m: N in
// ModeSequence, a hash of (identity, attempt) in ModeKeyed.
func stream(m Mode, info RequestInfo) uint64 {
	if m == ModeKeyed {
		h := fnv.New64a()
		if info.Key != "" {
			h.Write([]byte("key\x00"))
			h.Write([]byte(info.Key))
		} else {
			h.Write([]byte("req\x00"))
			h.Write([]byte(info.Method))
			h.Write([]byte{' '})
			h.Write([]byte(info.Path))
		}
		return splitmix64(h.Sum64() ^ splitmix64(uint64(info.Attempt)))
	}
	return splitmix64(info.Seq)
}

// decide draws the decision for a request. It is a pure function of its
// arguments: the same (seed, mode, info identity, rates, maxDelay) always
// give the same decision.
func decide(seed uint64, m Mode, rates Rates, maxDelay time.Duration, info RequestInfo) decision {
	r := rand.New(rand.NewPCG(splitmix64(seed), stream(m, info)))
	u := r.Float64() // the action draw comes first...
	var d decision
	d.action = ActionPass
	cum := 0.0
	for _, a := range faultOrder {
		cum += rates.of(a)
		if u < cum {
			d.action = a
			break
		}
	}
	if maxDelay > 0 { // ...then the delay draw, always, so it does not depend on the action.
		d.delay = time.Duration(r.Int64N(int64(maxDelay) + 1))
	}
	return d
}

// splitmix64 is the SplitMix64 finaliser: it spreads nearby inputs (seed 1,
// seed 2; request 7, request 8) over unrelated PCG states.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
