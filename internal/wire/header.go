package wire

// Header names.
const (
	// HeaderKey is the request header that carries the idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed marks a stored response: the handler did not run.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderOmitted marks the replay of a response whose body was too large
	// to store: the status and headers are the original, the body is empty.
	HeaderOmitted = "Idempotent-Response-Omitted"
	// HeaderWindow is on every response to a keyed request: the retention
	// window in whole seconds.
	HeaderWindow = "Idempotency-Window"
	// HeaderOriginalRequestID is on a replay whose original request had a
	// correlation id (a traceparent trace id, an X-Request-Id): that id, so
	// that an operator following a retry lands on the request that did the
	// work.
	HeaderOriginalRequestID = "Idempotency-Original-Request-Id"
)
