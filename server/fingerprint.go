package server

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/idemkit/idemkit/internal/canonjson"
)

// fingerprintVersion is the version of the canonical request form hashed by
// fingerprint. It is stored with every record; a change to the form gets a
// new version.
const fingerprintVersion = 1

// fingerprintPrefix starts the canonical form of version 1.
const fingerprintPrefix = "idemkit-fp-v1\n"

// fingerprint returns the SHA-256 of the canonical form of a request with the
// given body, and the version of that form (fingerprintVersion):
//
//	idemkit-fp-v1\n<METHOD>\n<escaped path>?<raw query>\n<json|raw>\n<body>
//
// When the Content-Type is application/json or ends in +json and body is
// valid JSON (see canonicalJSON), the body is canonicalised and the marker is
// "json"; otherwise the body is taken byte for byte and the marker is "raw".
// Host, headers other than Content-Type, and the key itself are not part of
// the fingerprint.
func fingerprint(r *http.Request, body []byte) ([]byte, int) {
	h := sha256.New()
	h.Write([]byte(fingerprintPrefix))
	h.Write([]byte(r.Method))
	h.Write([]byte{'\n'})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{'?'})
	h.Write([]byte(r.URL.RawQuery))
	h.Write([]byte{'\n'})
	if isJSONContentType(r.Header.Get("Content-Type")) {
		if doc, err := canonjson.Parse(body, &jsonLimits); err == nil {
			h.Write([]byte("json\n"))
			doc.WriteTo(h) // a hash does not fail
			return h.Sum(nil), fingerprintVersion
		}
	}
	h.Write([]byte("raw\n"))
	h.Write(body)
	return h.Sum(nil), fingerprintVersion
}

func isJSONContentType(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// errNotCanonicalizable is returned (wrapped) by canonicalJSON for input that
// is not JSON it can canonicalise: a syntax error, invalid UTF-8, an object
// with a duplicate key, a lone surrogate escape, nesting deeper than
// maxJSONDepth, or an exponent beyond ±1,000,000,000.
var errNotCanonicalizable = errors.New("idemkit/server: JSON cannot be canonicalised")

// maxJSONDepth is the deepest nesting version 1 of the fingerprint
// canonicalises; deeper bodies are hashed raw.
const maxJSONDepth = 1000

var jsonLimits = canonjson.Limits{MaxDepth: maxJSONDepth}

// canonicalJSON returns the canonical form of the JSON text b: object members
// sorted by key (by Unicode code point), no insignificant whitespace, strings
// re-escaped minimally, and numbers written as an exact canonical decimal, so
// that 1, 1.0, 10e-1 and 1E0 are the same text while large integers keep
// every digit. Two texts have the same canonical form exactly when they denote
// the same JSON value.
//
// Numbers are written as the shortest digit string d with no leading or
// trailing zeros and an exponent e (value d×10^e): as an integer when
// 0 ≤ e and len(d)+e ≤ 21, as a decimal fraction when -len(d)-6 < e < 0, and
// otherwise as d[0].d[1:]e±x. Zero is 0 (also for -0).
func canonicalJSON(b []byte) ([]byte, error) {
	doc, err := canonjson.Parse(b, &jsonLimits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotCanonicalizable, err)
	}
	var out bytes.Buffer
	out.Grow(len(b))
	doc.WriteTo(&out) // a bytes.Buffer does not fail
	return out.Bytes(), nil
}
