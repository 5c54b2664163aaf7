package server

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/idemkit/idemkit/internal/canonjson"
)

// fingerprintVersion is the version of the canonical request form hashed by
// fingerprint. It is stored with every record; a change to the form gets a
// new version, and records of older versions keep matching (see
// requestFingerprint).
//
// Version 1 hashed the path as the middleware saw it (r.URL, after any
// http.StripPrefix or mount), so moving the middleware changed it; version
// 2 hashes the request target as the client sent it (r.RequestURI).
const fingerprintVersion = 2

// fingerprintPrefixes start the canonical form of each version.
var fingerprintPrefixes = [...]string{1: "idemkit-fp-v1\n", 2: "idemkit-fp-v2\n"}

// requestFingerprint is a request's fingerprint in the current version,
// and what computes it in an older version a stored record may carry: the
// older versions are computed only when such a record is met (the
// canonical body is kept, not parsed again).
type requestFingerprint struct {
	sum []byte // the current version's

	// For older versions: the method, version 1's path and query, and the
	// body (doc when it is canonical JSON, else raw).
	method, v1Path, v1Query string
	doc                     *canonjson.Document
	raw                     []byte
}

// current returns the fingerprint new records store, and its version.
func (f requestFingerprint) current() ([]byte, int) {
	return f.sum, fingerprintVersion
}

// at returns the fingerprint of the given version, nil for an unknown one.
func (f requestFingerprint) at(version int) []byte {
	switch version {
	case fingerprintVersion:
		return f.sum
	case 1:
		h := sha256.New()
		f.writeForm(h, 1, f.v1Path+"?"+f.v1Query)
		return h.Sum(nil)
	}
	return nil
}

// writeForm writes the canonical form of the given version with its
// request target.
func (f requestFingerprint) writeForm(w io.Writer, version int, target string) {
	io.WriteString(w, fingerprintPrefixes[version]) //nolint:errcheck // a hash or a buffer does not fail
	io.WriteString(w, f.method)                     //nolint:errcheck // a hash or a buffer does not fail
	io.WriteString(w, "\n")                         //nolint:errcheck // a hash or a buffer does not fail
	io.WriteString(w, target)                       //nolint:errcheck // a hash or a buffer does not fail
	io.WriteString(w, "\n")                         //nolint:errcheck // a hash or a buffer does not fail
	f.writeBody(w)
}

// writeBody writes the body's part of the canonical form: the marker and
// the body.
func (f requestFingerprint) writeBody(w io.Writer) {
	if f.doc != nil {
		io.WriteString(w, "json\n") //nolint:errcheck // a hash or a buffer does not fail
		f.doc.WriteTo(w)            // a hash or a buffer does not fail
		return
	}
	io.WriteString(w, "raw\n") //nolint:errcheck // a hash or a buffer does not fail
	w.Write(f.raw)             //nolint:errcheck // a hash or a buffer does not fail
}

// matches reports whether rec was stored for the same request, by the
// fingerprint version rec carries.
func (f requestFingerprint) matches(rec *Record) bool {
	sum := f.at(rec.FingerprintVersion)
	return sum != nil && bytes.Equal(sum, rec.Fingerprint)
}

// fingerprintRequest returns the SHA-256 of the canonical form of a request
// with the given body, in every version:
//
//	idemkit-fp-v2\n<METHOD>\n<request target>\n<json|raw>\n<body>
//	idemkit-fp-v1\n<METHOD>\n<escaped path>?<raw query>\n<json|raw>\n<body>
//
// The request target (version 2) is r.RequestURI, the target as the client
// sent it, without the scheme and authority of an absolute-form target; a
// request built in process without one (r.RequestURI empty) uses
// r.URL.RequestURI(). Version 1 used r.URL's path, which http.StripPrefix
// and mounts rewrite.
//
// When the Content-Type is application/json or ends in +json and body is
// valid JSON (see canonicalJSON), the body is canonicalised and the marker is
// "json"; otherwise the body is taken byte for byte and the marker is "raw".
// Host, headers other than Content-Type, and the key itself are not part of
// the fingerprint.
func fingerprintRequest(r *http.Request, body []byte) requestFingerprint {
	f := requestFingerprint{method: r.Method, v1Path: r.URL.EscapedPath(), v1Query: r.URL.RawQuery, raw: body}
	if isJSONContentType(r.Header.Get("Content-Type")) {
		if doc, err := canonjson.Parse(body, &jsonLimits); err == nil {
			f.doc, f.raw = doc, nil
		}
	}
	target := requestTarget(r)
	if len(body) > maxPooledForm/2 {
		// A large body streams into the hash rather than into a buffer
		// as large.
		h := sha256.New()
		f.writeForm(h, fingerprintVersion, target)
		f.sum = h.Sum(nil)
		return f
	}
	// The form of a usual body is built in a pooled buffer and hashed in
	// one call: no allocation for the hash or the pieces of the form.
	buf := formBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	f.writeForm(buf, fingerprintVersion, target)
	sum := sha256.Sum256(buf.Bytes())
	if buf.Cap() <= maxPooledForm {
		formBuffers.Put(buf)
	}
	f.sum = sum[:]
	return f
}

// formBuffers holds the buffers fingerprintRequest builds forms in; one
// that grew beyond maxPooledForm (a large body) is left to the collector.
var formBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledForm = 64 << 10

// requestTarget is the request target of version 2: r.RequestURI without
// the scheme and authority of an absolute-form target.
func requestTarget(r *http.Request) string {
	t := r.RequestURI
	if t == "" {
		return r.URL.RequestURI()
	}
	if strings.HasPrefix(t, "/") {
		return t
	}
	if i := strings.Index(t, "://"); i >= 0 {
		rest := t[i+3:]
		if j := strings.IndexAny(rest, "/?"); j >= 0 {
			if rest[j] == '?' {
				return "/" + rest[j:]
			}
			return rest[j:]
		}
		return "/"
	}
	return t
}

// fingerprint returns the current fingerprint of a request with the given
// body, and its version.
func fingerprint(r *http.Request, body []byte) ([]byte, int) {
	return fingerprintRequest(r, body).current()
}

func isJSONContentType(ct string) bool {
	if ct == "" {
		return false
	}
	if strings.EqualFold(ct, "application/json") {
		return true // the usual case, without mime's allocations
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
