package server

import (
	"net/http"
	"strings"

	"github.com/idemkit/idemkit/internal/wire"
)

// maxCorrelationIDBytes bounds a stored correlation id.
const maxCorrelationIDBytes = 128

// headerStoredRequestID is the reserved entry of StoredResponse.Header
// that carries the original request's correlation id. It is never
// replayed as is: a replay takes it out, checks it again and sends it as
// wire.HeaderOriginalRequestID. A handler's own header of this name is
// never stored (neverStored).
const headerStoredRequestID = "Idemkit-Original-Request-Id"

// DefaultCorrelationID is the default Config.CorrelationIDFunc: the trace
// id (32 lowercase hex digits) of a valid W3C traceparent header, else the
// X-Request-Id header, else "". The middleware drops an id that is not
// valid (see Config.CorrelationIDFunc), so a hostile X-Request-Id is never
// stored or sent back.
func DefaultCorrelationID(r *http.Request) string {
	if id, ok := traceparentTraceID(r.Header.Values("Traceparent")); ok {
		return id
	}
	return strings.TrimSpace(r.Header.Get("X-Request-Id"))
}

// traceparentTraceID returns the trace id of a traceparent header
// (version-traceid-parentid-flags), if there is exactly one valid one.
func traceparentTraceID(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	parts := strings.Split(strings.TrimSpace(values[0]), "-")
	if len(parts) < 4 {
		return "", false
	}
	version, trace, parent, flags := parts[0], parts[1], parts[2], parts[3]
	if len(version) != 2 || !lowerHex(version) || version == "ff" ||
		(version == "00" && len(parts) != 4) {
		return "", false
	}
	if len(trace) != 32 || !lowerHex(trace) || strings.Trim(trace, "0") == "" {
		return "", false
	}
	if len(parent) != 16 || !lowerHex(parent) || strings.Trim(parent, "0") == "" {
		return "", false
	}
	if len(flags) != 2 || !lowerHex(flags) {
		return "", false
	}
	return trace, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validCorrelationID reports whether id may be stored and sent in a
// response header: 1 to maxCorrelationIDBytes bytes of letters, digits
// and -._~:/+=@ (no space, quote, comma, semicolon, CR or LF: nothing
// that could split or extend a header).
func validCorrelationID(id string) bool {
	if id == "" || len(id) > maxCorrelationIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("-._~:/+=@", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// correlationID returns r's correlation id, or "" if it has none or an
// invalid one.
func (m *Middleware) correlationID(r *http.Request) string {
	id := m.cfg.CorrelationIDFunc(r)
	if !validCorrelationID(id) {
		return ""
	}
	return id
}

// withRequestID returns h with the reserved entry for id, if id is set.
func withRequestID(h http.Header, id string) http.Header {
	if id != "" {
		h[headerStoredRequestID] = []string{id}
	}
	return h
}

// takeRequestID returns the replay headers of stored (without the
// reserved entry) and the original request's correlation id it held, ""
// if none or an invalid one.
func takeRequestID(stored http.Header) (http.Header, string) {
	v, ok := stored[headerStoredRequestID]
	if !ok {
		return stored, ""
	}
	out := make(http.Header, len(stored))
	for k, vv := range stored {
		if k != headerStoredRequestID {
			out[k] = vv
		}
	}
	if len(v) != 1 || !validCorrelationID(v[0]) {
		return out, ""
	}
	return out, v[0]
}

// neverStoredCorrelation are the correlation headers a handler may not
// store itself: the reserved entry and the header a replay sends.
var neverStoredCorrelation = []string{headerStoredRequestID, wire.HeaderOriginalRequestID}
