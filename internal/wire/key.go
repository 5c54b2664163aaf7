package wire

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key, in bytes after unquoting.
const MaxKeyBytes = 255

var (
	// ErrKeyMissing is returned by ParseKey when the request has no
	// Idempotency-Key field line.
	ErrKeyMissing = errors.New("idemkit: Idempotency-Key header missing")
	// ErrKeyInvalid is matched by every *KeyError: the key is empty, too
	// long, not valid UTF-8, has control characters, is malformed, or the
	// header is repeated.
	ErrKeyInvalid = errors.New("idemkit: invalid Idempotency-Key")
)

// A KeyError says why a key or an Idempotency-Key field value is invalid.
// It matches ErrKeyInvalid.
type KeyError struct {
	// Reason is a sentence for a person: what is wrong and, where it helps,
	// what to do.
	Reason string
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v: %s", ErrKeyInvalid, e.Reason) }

// Is reports whether target is ErrKeyInvalid.
func (e *KeyError) Is(target error) bool { return target == ErrKeyInvalid }

func keyErrorf(format string, args ...any) error {
	return &KeyError{Reason: fmt.Sprintf(format, args...)}
}

// ParseKey returns the idempotency key in fieldLines, the values of every
// Idempotency-Key field line of a request (r.Header.Values(HeaderKey)).
//
// The value is either an RFC 8941 sf-string ("abc") or a bare string (abc);
// both forms name the same key. Surrounding spaces and tabs are ignored. The
// key must be 1 to MaxKeyBytes bytes of valid UTF-8 after unquoting, with no
// control characters. A bare key must not contain a comma, which is how a
// proxy joins repeated field lines; quote it if it must.
//
// ParseKey returns ErrKeyMissing if fieldLines is empty, and a *KeyError
// (which matches ErrKeyInvalid) if there is more than one field line or the
// value is malformed.
func ParseKey(fieldLines []string) (string, error) {
	switch len(fieldLines) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		return "", keyErrorf("the header is repeated (%d field lines); send exactly one", len(fieldLines))
	}
	v := strings.Trim(fieldLines[0], " \t")
	if v == "" {
		return "", keyErrorf("the key is empty")
	}
	var key string
	if v[0] == '"' {
		k, err := ParseString(v)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		if strings.IndexByte(v, ',') >= 0 {
			return "", keyErrorf("a bare key must not contain a comma (it looks like a list of keys); quote it")
		}
		key = v
	}
	if err := CheckKey(key, MaxKeyBytes); err != nil {
		return "", err
	}
	return key, nil
}

// ParseString parses one RFC 8941 sf-string that is the whole of v: an
// opening quote, printable ASCII with '"' and '\' escaped by '\', and a
// closing quote as the last byte. Parameters, lists and surrounding
// characters are refused with a *KeyError.
func ParseString(v string) (string, error) {
	if v == "" || v[0] != '"' {
		return "", keyErrorf("a quoted key must start with '\"'")
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", keyErrorf("the quoted key ends inside an escape")
			}
			if v[i] != '"' && v[i] != '\\' {
				return "", keyErrorf("invalid escape \\%c in the quoted key (only \\\" and \\\\ are allowed)", v[i])
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", keyErrorf("characters after the closing quote (parameters and lists are not allowed)")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", keyErrorf("the quoted key has a byte outside printable ASCII (0x%02x) at %d", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", keyErrorf("the quoted key has no closing quote")
}

// QuoteString returns k as an RFC 8941 sf-string, '"' and '\' escaped. ok is
// false, and the string empty, if k has a byte outside printable ASCII
// (0x20 to 0x7e), which an sf-string cannot carry.
func QuoteString(k string) (quoted string, ok bool) {
	if !printableASCII(k) {
		return "", false
	}
	return `"` + sfEscaper.Replace(k) + `"`, true
}

var sfEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// CheckKey returns a *KeyError (matching ErrKeyInvalid) if k, a key as the
// caller means it, is not valid in either form: empty, longer than maxBytes
// bytes, not valid UTF-8, or with a control character (C0, DEL or C1).
// maxBytes above MaxKeyBytes, or not positive, means MaxKeyBytes.
//
// A key CheckKey accepts may still need quoting to arrive unchanged (see
// NeedsQuotes) or be impossible to quote (see QuoteString).
func CheckKey(k string, maxBytes int) error {
	if maxBytes <= 0 || maxBytes > MaxKeyBytes {
		maxBytes = MaxKeyBytes
	}
	if len(k) == 0 {
		return keyErrorf("the key is empty")
	}
	if len(k) > maxBytes {
		return keyErrorf("the key is %d bytes long; at most %d are allowed", len(k), maxBytes)
	}
	if !utf8.ValidString(k) {
		return keyErrorf("the key is not valid UTF-8")
	}
	for i, r := range k {
		if unicode.IsControl(r) {
			return keyErrorf("the key has a control character (U+%04X) at byte %d", r, i)
		}
	}
	return nil
}

// NeedsQuotes reports whether k, sent bare, would reach the server as a
// different key or none: HTTP strips surrounding spaces and tabs, a leading
// quote starts an RFC 8941 string, a comma joins field lines. The empty key
// needs quotes (and is invalid in both forms).
func NeedsQuotes(k string) bool {
	return k == "" || k[0] == '"' || strings.IndexByte(k, ',') >= 0 ||
		strings.Trim(k, " \t") != k
}

// printableASCII reports whether every byte of s is in 0x20 to 0x7e.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
