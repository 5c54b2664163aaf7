package canonjson

// This file is a verbatim copy of the JSON canonicaliser that server/fingerprint.go
// used for version 1 of the fingerprint before this package existed (only the
// names of the entry point and its error are changed). It is the reference the
// differential fuzz target compares the streaming implementation against: the
// canonical form hashed into stored fingerprints must never change, so this
// file must not be edited to follow changes in the package.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// errReference is returned (wrapped) by CanonicalJSON for input that
// is not JSON it can canonicalise: a syntax error, invalid UTF-8, an object
// with a duplicate key, a lone surrogate escape, nesting deeper than
// maxJSONDepth, or an exponent beyond ±maxJSONExponent.
var errReference = errors.New("reference: JSON cannot be canonicalised")

const (
	maxJSONDepth    = 1000
	maxJSONExponent = 1_000_000_000
)

// referenceCanonical returns the canonical form of the JSON text b: object members
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
func referenceCanonical(b []byte) ([]byte, error) {
	p := jsonParser{in: b}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.in) {
		return nil, p.errorf("unexpected data after the top-level value")
	}
	var out bytes.Buffer
	out.Grow(len(b))
	v.encode(&out)
	return out.Bytes(), nil
}

// jsonKind is the type of a parsed JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonFalse
	jsonTrue
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

// jsonValue is a parsed JSON value. Numbers keep their exact decimal value.
type jsonValue struct {
	kind    jsonKind
	str     string // string value, or the canonical text of a number
	items   []jsonValue
	members []jsonMember
}

type jsonMember struct {
	key   string
	value jsonValue
}

// equal reports whether v and w are the same JSON value.
func (v *jsonValue) equal(w *jsonValue) bool {
	if v.kind != w.kind || v.str != w.str || len(v.items) != len(w.items) || len(v.members) != len(w.members) {
		return false
	}
	for i := range v.items {
		if !v.items[i].equal(&w.items[i]) {
			return false
		}
	}
	for i := range v.members { // sorted by key
		if v.members[i].key != w.members[i].key || !v.members[i].value.equal(&w.members[i].value) {
			return false
		}
	}
	return true
}

func (v *jsonValue) encode(out *bytes.Buffer) {
	switch v.kind {
	case jsonNull:
		out.WriteString("null")
	case jsonFalse:
		out.WriteString("false")
	case jsonTrue:
		out.WriteString("true")
	case jsonNumber:
		out.WriteString(v.str)
	case jsonString:
		encodeJSONString(out, v.str)
	case jsonArray:
		out.WriteByte('[')
		for i := range v.items {
			if i > 0 {
				out.WriteByte(',')
			}
			v.items[i].encode(out)
		}
		out.WriteByte(']')
	case jsonObject:
		out.WriteByte('{')
		for i := range v.members {
			if i > 0 {
				out.WriteByte(',')
			}
			encodeJSONString(out, v.members[i].key)
			out.WriteByte(':')
			v.members[i].value.encode(out)
		}
		out.WriteByte('}')
	}
}

const hexDigits = "0123456789abcdef"

func encodeJSONString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			if c < 0x20 {
				out.WriteString(`\u00`)
				out.WriteByte(hexDigits[c>>4])
				out.WriteByte(hexDigits[c&0xf])
			} else {
				out.WriteByte(c)
			}
		}
	}
	out.WriteByte('"')
}

type jsonParser struct {
	in  []byte
	pos int
	// maxExponent bounds the exponents it reads; 0 is maxJSONExponent.
	maxExponent int64
}

func (p *jsonParser) exponentLimit() int64 {
	if p.maxExponent == 0 {
		return maxJSONExponent
	}
	return p.maxExponent
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at offset %d: %s", errReference, p.pos, fmt.Sprintf(format, args...))
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (jsonValue, error) {
	if depth > maxJSONDepth {
		return jsonValue{}, p.errorf("nesting deeper than %d", maxJSONDepth)
	}
	if p.pos >= len(p.in) {
		return jsonValue{}, p.errorf("unexpected end of input")
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.string()
		return jsonValue{kind: jsonString, str: s}, err
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case p.literal("true"):
		return jsonValue{kind: jsonTrue}, nil
	case p.literal("false"):
		return jsonValue{kind: jsonFalse}, nil
	case p.literal("null"):
		return jsonValue{kind: jsonNull}, nil
	default:
		return jsonValue{}, p.errorf("unexpected character %q", c)
	}
}

func (p *jsonParser) literal(lit string) bool {
	if bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		p.pos += len(lit)
		return true
	}
	return false
}

func (p *jsonParser) object(depth int) (jsonValue, error) {
	p.pos++ // {
	v := jsonValue{kind: jsonObject, members: []jsonMember{}}
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return jsonValue{}, p.errorf("expected an object key")
		}
		k, err := p.string()
		if err != nil {
			return jsonValue{}, err
		}
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return jsonValue{}, p.errorf("expected ':'")
		}
		p.pos++
		p.skipSpace()
		m, err := p.value(depth + 1)
		if err != nil {
			return jsonValue{}, err
		}
		v.members = append(v.members, jsonMember{key: k, value: m})
		p.skipSpace()
		if p.pos >= len(p.in) {
			return jsonValue{}, p.errorf("unterminated object")
		}
		if p.in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.in[p.pos] != '}' {
			return jsonValue{}, p.errorf("expected ',' or '}'")
		}
		p.pos++
		break
	}
	slices.SortFunc(v.members, func(a, b jsonMember) int { return strings.Compare(a.key, b.key) })
	for i := 1; i < len(v.members); i++ {
		if v.members[i].key == v.members[i-1].key {
			return jsonValue{}, p.errorf("duplicate object key %q", v.members[i].key)
		}
	}
	return v, nil
}

func (p *jsonParser) array(depth int) (jsonValue, error) {
	p.pos++ // [
	v := jsonValue{kind: jsonArray, items: []jsonValue{}}
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return v, nil
	}
	for {
		p.skipSpace()
		item, err := p.value(depth + 1)
		if err != nil {
			return jsonValue{}, err
		}
		v.items = append(v.items, item)
		p.skipSpace()
		if p.pos >= len(p.in) {
			return jsonValue{}, p.errorf("unterminated array")
		}
		if p.in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.in[p.pos] != ']' {
			return jsonValue{}, p.errorf("expected ',' or ']'")
		}
		p.pos++
		return v, nil
	}
}

// string parses a JSON string starting at the opening quote and returns its
// value, which is always valid UTF-8.
func (p *jsonParser) string() (string, error) {
	p.pos++ // "
	var b []byte
	start := p.pos
	for {
		if p.pos >= len(p.in) {
			return "", p.errorf("unterminated string")
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			b = append(b, p.in[start:p.pos]...)
			p.pos++
			return string(b), nil
		case c < 0x20:
			return "", p.errorf("control character in string")
		case c == '\\':
			b = append(b, p.in[start:p.pos]...)
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			b = utf8.AppendRune(b, r)
			start = p.pos
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.errorf("invalid UTF-8")
			}
			p.pos += size
		}
	}
}

// escape parses one escape sequence at p.pos (the backslash).
func (p *jsonParser) escape() (rune, error) {
	p.pos++ // backslash
	if p.pos >= len(p.in) {
		return 0, p.errorf("unterminated escape")
	}
	c := p.in[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := p.hex4()
		if err != nil {
			return 0, err
		}
		if utf16.IsSurrogate(r) {
			if r >= 0xdc00 || !bytes.HasPrefix(p.in[p.pos:], []byte(`\u`)) {
				return 0, p.errorf("lone surrogate escape")
			}
			p.pos += 2
			r2, err := p.hex4()
			if err != nil {
				return 0, err
			}
			dec := utf16.DecodeRune(r, r2)
			if dec == utf8.RuneError {
				return 0, p.errorf("invalid surrogate pair")
			}
			return dec, nil
		}
		return r, nil
	default:
		return 0, p.errorf("invalid escape \\%c", c)
	}
}

func (p *jsonParser) hex4() (rune, error) {
	if p.pos+4 > len(p.in) {
		return 0, p.errorf("short \\u escape")
	}
	var r rune
	for _, c := range p.in[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, p.errorf("invalid \\u escape")
		}
	}
	p.pos += 4
	return r, nil
}

// number parses a JSON number and returns it in canonical form.
func (p *jsonParser) number() (jsonValue, error) {
	start := p.pos
	neg := false
	if p.in[p.pos] == '-' {
		neg = true
		p.pos++
	}
	intStart := p.pos
	switch {
	case p.pos < len(p.in) && p.in[p.pos] == '0':
		p.pos++
	case p.pos < len(p.in) && p.in[p.pos] >= '1' && p.in[p.pos] <= '9':
		for p.pos < len(p.in) && isDigit(p.in[p.pos]) {
			p.pos++
		}
	default:
		return jsonValue{}, p.errorf("invalid number")
	}
	intPart := p.in[intStart:p.pos]
	var frac []byte
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		fs := p.pos
		for p.pos < len(p.in) && isDigit(p.in[p.pos]) {
			p.pos++
		}
		if p.pos == fs {
			return jsonValue{}, p.errorf("invalid number: no digits after '.'")
		}
		frac = p.in[fs:p.pos]
	}
	var exp int64
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		expNeg := false
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			expNeg = p.in[p.pos] == '-'
			p.pos++
		}
		es := p.pos
		for p.pos < len(p.in) && isDigit(p.in[p.pos]) {
			if exp > p.exponentLimit() {
				return jsonValue{}, p.errorf("exponent out of range in %q", p.in[start:p.pos])
			}
			exp = exp*10 + int64(p.in[p.pos]-'0')
			p.pos++
		}
		if p.pos == es {
			return jsonValue{}, p.errorf("invalid number: no digits in exponent")
		}
		if exp > p.exponentLimit() {
			return jsonValue{}, p.errorf("exponent out of range")
		}
		if expNeg {
			exp = -exp
		}
	}
	// value = (intPart frac) × 10^(exp - len(frac))
	digits := make([]byte, 0, len(intPart)+len(frac))
	digits = append(digits, intPart...)
	digits = append(digits, frac...)
	exp -= int64(len(frac))
	i := 0
	for i < len(digits) && digits[i] == '0' {
		i++
	}
	digits = digits[i:]
	if len(digits) == 0 {
		return jsonValue{kind: jsonNumber, str: "0"}, nil
	}
	j := len(digits)
	for digits[j-1] == '0' {
		j--
	}
	exp += int64(len(digits) - j)
	digits = digits[:j]
	return jsonValue{kind: jsonNumber, str: formatDecimal(neg, digits, exp)}, nil
}

// formatDecimal writes (-)digits×10^exp; digits has no leading or trailing
// zeros.
func formatDecimal(neg bool, digits []byte, exp int64) string {
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	n := int64(len(digits))
	switch {
	case exp >= 0 && n+exp <= 21:
		b.Write(digits)
		for range exp {
			b.WriteByte('0')
		}
	case exp < 0 && n+exp > 0:
		b.Write(digits[:n+exp])
		b.WriteByte('.')
		b.Write(digits[n+exp:])
	case exp < 0 && n+exp > -6:
		b.WriteString("0.")
		for range -(n + exp) {
			b.WriteByte('0')
		}
		b.Write(digits)
	default:
		b.WriteByte(digits[0])
		if n > 1 {
			b.WriteByte('.')
			b.Write(digits[1:])
		}
		e := exp + n - 1
		b.WriteByte('e')
		if e >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.FormatInt(e, 10))
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
