package server

import "github.com/idemkit/idemkit/internal/wire"

// HeaderKey is the request header that carries the idempotency key. The
// middleware also sets Idempotency-Window (the retention window, in whole
// seconds) on every keyed response, Idempotent-Replayed: true on a replay,
// and Idempotent-Response-Omitted: true on the replay of a response whose
// body was too large to store.
const HeaderKey = wire.HeaderKey
