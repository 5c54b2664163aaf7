package sqlstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"
)

// Stored response headers are a JSON object from header name to a list of
// values, e.g. {"Content-Type":["application/json"],"Vary":["A","B"]}. A value
// that JSON (or PostgreSQL jsonb) cannot hold exactly, because it is not valid
// UTF-8 or contains NUL, is stored as {"b64":"<standard base64>"} instead of a
// string, so that every value round-trips byte for byte.

// errHeaderName is returned by EncodeHeader for a header name that cannot be
// stored.
var errHeaderName = errors.New("idemkit/server: header name is not valid UTF-8 or contains NUL")

// headerBinaryValue is the stored form of a value that is not plain text.
type headerBinaryValue struct {
	B64 string `json:"b64"`
}

// EncodeHeader returns the stored JSON form of h. A nil or empty header
// encodes as {}. It fails only for a header name that is not valid UTF-8 or
// contains NUL; net/http never sends such a name.
func EncodeHeader(h http.Header) ([]byte, error) {
	names := make([]string, 0, len(h))
	for name := range h {
		if !textSafe(name) {
			return nil, fmt.Errorf("%w: %q", errHeaderName, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeJSON(&buf, name); err != nil {
			return nil, err
		}
		buf.WriteString(":[")
		for j, v := range h[name] {
			if j > 0 {
				buf.WriteByte(',')
			}
			var val any = v
			if !textSafe(v) {
				val = headerBinaryValue{B64: base64.StdEncoding.EncodeToString([]byte(v))}
			}
			if err := writeJSON(&buf, val); err != nil {
				return nil, err
			}
		}
		buf.WriteByte(']')
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// DecodeHeader parses the stored JSON form of a header. It never panics; bad
// input is an error. Empty input or JSON null decode as an empty header. The
// result is never nil.
func DecodeHeader(b []byte) (http.Header, error) {
	if h, ok := decodeHeaderPlain(b); ok {
		return h, nil
	}
	return decodeHeaderJSON(b)
}

// decodeHeaderJSON is DecodeHeader by encoding/json: every form, with its
// errors.
func decodeHeaderJSON(b []byte) (http.Header, error) {
	h := make(http.Header)
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return h, nil
	}
	var raw map[string][]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("idemkit/server: decode stored headers: %w", err)
	}
	for name, vals := range raw {
		out := make([]string, 0, len(vals))
		for _, rv := range vals {
			rv = bytes.TrimSpace(rv)
			if len(rv) > 0 && rv[0] == '{' {
				var bin headerBinaryValue
				if err := json.Unmarshal(rv, &bin); err != nil {
					return nil, fmt.Errorf("idemkit/server: decode stored header %q: %w", name, err)
				}
				v, err := base64.StdEncoding.DecodeString(bin.B64)
				if err != nil {
					return nil, fmt.Errorf("idemkit/server: decode stored header %q: %w", name, err)
				}
				out = append(out, string(v))
				continue
			}
			var s string
			if err := json.Unmarshal(rv, &s); err != nil {
				return nil, fmt.Errorf("idemkit/server: decode stored header %q: %w", name, err)
			}
			out = append(out, s)
		}
		h[name] = out
	}
	return h, nil
}

// decodeHeaderPlain decodes the common stored form without encoding/json:
// an object of arrays of strings with no escape sequence, as EncodeHeader
// and PostgreSQL's jsonb write nearly every response's headers (JSON
// whitespace allowed). Anything else — an escape, a binary value, invalid
// UTF-8, a control character, any other shape — reports ok false, and
// DecodeHeader decodes it with encoding/json: on what it accepts, this
// returns what encoding/json would (FuzzResponseEncoding compares them).
func decodeHeaderPlain(b []byte) (h http.Header, ok bool) {
	p := plainParser{b: b}
	if !p.skip('{') {
		return nil, false
	}
	h = make(http.Header)
	if p.skip('}') {
		return h, p.end()
	}
	for {
		name, ok := p.str()
		if !ok || !p.skip(':') || !p.skip('[') {
			return nil, false
		}
		var vals []string
		if !p.skip(']') {
			for {
				v, ok := p.str()
				if !ok {
					return nil, false
				}
				vals = append(vals, v)
				if p.skip(']') {
					break
				}
				if !p.skip(',') {
					return nil, false
				}
			}
		}
		if vals == nil {
			vals = []string{}
		}
		h[name] = vals
		if p.skip('}') {
			return h, p.end()
		}
		if !p.skip(',') {
			return nil, false
		}
	}
}

// plainParser reads the subset of JSON decodeHeaderPlain accepts.
type plainParser struct {
	b []byte
	i int
}

func (p *plainParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// skip consumes c after whitespace, reporting whether it was there.
func (p *plainParser) skip(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str consumes a string with no escape, control character or invalid UTF-8.
func (p *plainParser) str() (string, bool) {
	if !p.skip('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		switch c := p.b[p.i]; {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\' || c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// end reports whether only whitespace is left.
func (p *plainParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// textSafe reports whether s survives a JSON/jsonb round trip unchanged.
func textSafe(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// writeJSON appends v as JSON without HTML escaping.
func writeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	// Encoder.Encode appends a newline.
	buf.Truncate(buf.Len() - 1)
	return nil
}
