package server

import (
	"net/http"
	"time"
)

// ConfigOf returns the configuration m runs with, defaults filled in.
func ConfigOf(m *Middleware) *Config { return m.cfg }

// WindowOf returns the Idempotency-Window header value of m.
func WindowOf(m *Middleware) string { return m.window }

// ReplayHeadersOf returns the set of headers m stores for replay.
func ReplayHeadersOf(m *Middleware) map[string]bool { return m.replayHeaders }

// SetTimeNowFunc makes m read the time from now.
func SetTimeNowFunc(m *Middleware, now func() time.Time) { m.timeNowFunc = now }

// Internals the external tests assert on.
var (
	ErrFingerprintMismatchForTest = errFingerprintMismatch
	ErrKeyMissingForTest          = errKeyMissing
	ErrUnauthenticatedForTest     = errUnauthenticated
)

// MaxScopePartBytesForTest bounds a principal or an endpoint.
const MaxScopePartBytesForTest = maxScopePartBytes

// FingerprintAtForTest returns the fingerprint of version of a request
// with body.
func FingerprintAtForTest(r *http.Request, body []byte, version int) []byte {
	return fingerprintRequest(r, body).at(version)
}

// Correlation ids, for the table tests.
var (
	ValidCorrelationIDForTest    = validCorrelationID
	HeaderStoredRequestIDForTest = headerStoredRequestID
)
