package server

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// MaxKeyBytes is the longest key accepted, in bytes after unquoting.
const MaxKeyBytes = 255

// ParseKey returns the idempotency key in header, the values of every
// Idempotency-Key field line of a request (r.Header.Values(HeaderKey)).
//
// The value is either an RFC 8941 sf-string ("abc") or a bare string (abc);
// both forms name the same key. Surrounding spaces and tabs are ignored. The
// key must be 1 to MaxKeyBytes bytes of valid UTF-8 after unquoting, with no
// control characters. A bare key must not contain a comma, which is how a
// proxy joins repeated field lines; quote it if it must.
//
// ParseKey returns ErrKeyMissing if header is empty, and a *KeyError (which
// matches ErrKeyInvalid) if there is more than one field line or the value is
// malformed.
func ParseKey(header []string) (string, error) {
	switch len(header) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", &KeyError{Reason: fmt.Sprintf("the header is repeated (%d field lines); send exactly one", len(header))}
	}
	v := strings.Trim(header[0], " \t")
	if v == "" {
		return "", &KeyError{Reason: "the key is empty"}
	}
	var key string
	if v[0] == '"' {
		k, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		if strings.IndexByte(v, ',') >= 0 {
			return "", &KeyError{Reason: "a bare key must not contain a comma (it looks like a list of keys); quote it"}
		}
		key = v
	}
	if key == "" {
		return "", &KeyError{Reason: "the key is empty"}
	}
	if len(key) > MaxKeyBytes {
		return "", &KeyError{Reason: fmt.Sprintf("the key is %d bytes long; at most %d are allowed", len(key), MaxKeyBytes)}
	}
	if !utf8.ValidString(key) {
		return "", &KeyError{Reason: "the key is not valid UTF-8"}
	}
	for i, r := range key {
		if unicode.IsControl(r) {
			return "", &KeyError{Reason: fmt.Sprintf("the key has a control character (U+%04X) at byte %d", r, i)}
		}
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string that is the whole of v (v[0] is
// the opening quote). Parameters, lists and trailing characters are refused.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", &KeyError{Reason: "the quoted key ends inside an escape"}
			}
			if v[i] != '"' && v[i] != '\\' {
				return "", &KeyError{Reason: fmt.Sprintf("invalid escape \\%c in the quoted key (only \\\" and \\\\ are allowed)", v[i])}
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", &KeyError{Reason: "characters after the closing quote (parameters and lists are not allowed)"}
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", &KeyError{Reason: fmt.Sprintf("the quoted key has a byte outside printable ASCII (0x%02x) at %d", c, i)}
		default:
			b.WriteByte(c)
		}
	}
	return "", &KeyError{Reason: "the quoted key has no closing quote"}
}
