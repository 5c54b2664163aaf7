package faultproxy

import "slices"

// Action is what the proxy does with one request.
type Action string

const (
	// ActionPass forwards the request and relays the response unchanged.
	ActionPass Action = "pass"
	// ActionDropResponse forwards the request, reads the whole upstream
	// response and then closes the client connection without writing
	// anything: the upstream did the work, the client gets an error such as
	// io.EOF.
	ActionDropResponse Action = "drop_response"
	// ActionReset closes the client connection with a TCP reset (SO_LINGER
	// 0) before forwarding anything: the upstream never sees the request.
	ActionReset Action = "reset"
	// ActionUnavailable answers 503 Service Unavailable with a Retry-After
	// header and a problem+json body, without forwarding.
	ActionUnavailable Action = "unavailable"
	// ActionDelay waits for a seeded duration of at most Config.MaxDelay,
	// then forwards and relays like ActionPass.
	ActionDelay Action = "delay"
	// ActionSlowWrite forwards, reads the whole response, then relays the
	// body in chunks of Config.ChunkSize bytes, flushing each and pausing
	// Config.ChunkPause between them, so the client reads a response split
	// over many writes.
	ActionSlowWrite Action = "slow_write"
)

// Actions lists every action. Changing it changes nothing in the proxy.
var Actions = []Action{
	ActionPass,
	ActionDropResponse,
	ActionReset,
	ActionUnavailable,
	ActionDelay,
	ActionSlowWrite,
}

// faultOrder is the order in which the seeded draw considers the faults;
// ActionPass takes the probability left over. Changing it changes every
// seeded run.
var faultOrder = [...]Action{
	ActionDropResponse,
	ActionReset,
	ActionUnavailable,
	ActionDelay,
	ActionSlowWrite,
}

// valid reports whether a is one of Actions.
func (a Action) valid() bool {
	return a == ActionPass || slices.Contains(faultOrder[:], a)
}
