package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// The stored header codec. Header values are bytes: a Latin-1 or otherwise
// non-UTF-8 value must reach the server exactly as the caller gave it, so
// headers are not stored as JSON (which turns invalid UTF-8 into U+FFFD).
//
// Format (version 1): a 0x00 byte (no JSON text starts with it), the
// version byte 0x01, then uvarint(number of names) and, per name in sorted
// order, uvarint(len) name, uvarint(number of values) and per value
// uvarint(len) value. Rows written before it hold JSON ({"Name":["v"]}),
// which DecodeHeader still reads.

const headerCodecV1 = 1

// maxHeaderEntries bounds what DecodeHeader accepts from a damaged row.
const maxHeaderEntries = 1 << 16

// ErrHeaderCodec is matched by every error of DecodeHeader: the bytes are
// not a header EncodeHeader wrote (nor a legacy JSON row).
var ErrHeaderCodec = errors.New("idemkit: stored header unreadable")

// EncodeHeader returns the stored form of h (format version 1): names in
// sorted order, each with its values in order, every byte kept. A nil or
// empty header encodes as the 3 bytes 00 01 00.
func EncodeHeader(h http.Header) []byte {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	b := []byte{0, headerCodecV1}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(h[k])))
		for _, v := range h[k] {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// DecodeHeader reads what EncodeHeader wrote, and the JSON object
// ({"Name":["v"]}) of rows written before format version 1. Empty b is an
// empty header. Names are canonicalised (http.CanonicalHeaderKey); a name
// that is not an RFC 9110 token, or a value with a byte no HTTP client may
// send (a control byte other than tab), is refused. Every error matches
// ErrHeaderCodec.
func DecodeHeader(b []byte) (http.Header, error) {
	h, err := decodeHeader(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHeaderCodec, err)
	}
	return h, nil
}

var errHeaderTruncated = errors.New("truncated")

func decodeHeader(b []byte) (http.Header, error) {
	h := http.Header{}
	switch {
	case len(b) == 0:
		return h, nil
	case b[0] != 0:
		return decodeHeaderJSON(b)
	case len(b) < 2 || b[1] != headerCodecV1:
		return nil, fmt.Errorf("unknown header codec")
	}
	rest := b[2:]
	next := func() (uint64, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 {
			return 0, errHeaderTruncated
		}
		rest = rest[k:]
		return n, nil
	}
	bytesOf := func() (string, error) {
		n, err := next()
		if err != nil {
			return "", err
		}
		if n > uint64(len(rest)) {
			return "", errHeaderTruncated
		}
		s := string(rest[:n])
		rest = rest[n:]
		return s, nil
	}
	names, err := next()
	if err != nil {
		return nil, err
	}
	if names > maxHeaderEntries {
		return nil, fmt.Errorf("%d header names", names)
	}
	for i := uint64(0); i < names; i++ {
		k, err := bytesOf()
		if err != nil {
			return nil, err
		}
		if !ValidToken(k) {
			return nil, fmt.Errorf("header name %q", k)
		}
		nv, err := next()
		if err != nil {
			return nil, err
		}
		if nv > maxHeaderEntries {
			return nil, fmt.Errorf("header %s: %d values", k, nv)
		}
		cn := http.CanonicalHeaderKey(k)
		for j := uint64(0); j < nv; j++ {
			v, err := bytesOf()
			if err != nil {
				return nil, err
			}
			if !validHeaderValue(v) {
				return nil, fmt.Errorf("header %s: a byte no HTTP client may send", k)
			}
			h[cn] = append(h[cn], v)
		}
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d bytes after the header", len(rest))
	}
	return h, nil
}

// decodeHeaderJSON reads the JSON encoding of rows written before
// headerCodecV1.
func decodeHeaderJSON(b []byte) (http.Header, error) {
	h := http.Header{}
	var m map[string][]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if !ValidToken(k) {
			return nil, fmt.Errorf("header name %q", k)
		}
		for _, s := range v {
			if strings.ContainsAny(s, "\r\n\x00") {
				return nil, fmt.Errorf("header %s: CR, LF or NUL in value", k)
			}
		}
		h[http.CanonicalHeaderKey(k)] = append(h[http.CanonicalHeaderKey(k)], v...)
	}
	return h, nil
}

// validHeaderValue reports whether net/http's client sends v as a field
// value: no control bytes other than horizontal tab (bytes 0x80 and up,
// obs-text, are sent as they are).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// ValidToken reports whether s is an RFC 9110 token (a method or a header
// field name).
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
