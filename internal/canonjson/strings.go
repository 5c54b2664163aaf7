package canonjson

import (
	"unicode/utf16"
	"unicode/utf8"
)

// decodeEscape decodes the escape sequence whose backslash is at src[pos]. It
// returns the rune and the length of the sequence, or a non-empty msg saying
// why the sequence is invalid. A surrogate pair (\ud83d\ude00) is one
// sequence; a lone surrogate is invalid.
func decodeEscape(src []byte, pos int) (r rune, n int, msg string) {
	if pos+1 >= len(src) {
		return 0, 0, "unterminated escape"
	}
	switch c := src[pos+1]; c {
	case '"', '\\', '/':
		return rune(c), 2, ""
	case 'b':
		return '\b', 2, ""
	case 'f':
		return '\f', 2, ""
	case 'n':
		return '\n', 2, ""
	case 'r':
		return '\r', 2, ""
	case 't':
		return '\t', 2, ""
	case 'u':
		r, msg := hex4(src, pos+2)
		if msg != "" {
			return 0, 0, msg
		}
		if !utf16.IsSurrogate(r) {
			return r, 6, ""
		}
		if r >= 0xdc00 || pos+7 >= len(src) || src[pos+6] != '\\' || src[pos+7] != 'u' {
			return 0, 0, "lone surrogate escape"
		}
		r2, msg := hex4(src, pos+8)
		if msg != "" {
			return 0, 0, msg
		}
		if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
			return dec, 12, ""
		}
		return 0, 0, "invalid surrogate pair"
	default:
		return 0, 0, "invalid escape \\" + string(rune(c))
	}
}

// hex4 decodes the four hex digits at src[pos:].
func hex4(src []byte, pos int) (rune, string) {
	if pos+4 > len(src) {
		return 0, `short \u escape`
	}
	var r rune
	for _, c := range src[pos : pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, `invalid \u escape`
		}
	}
	return r, ""
}

// keyReader reads the decoded bytes (UTF-8) of a checked JSON string one by
// one, without allocating.
type keyReader struct {
	src  []byte
	pos  int // next byte of src, inside the string
	rune [utf8.UTFMax]byte
	n, i int // rune[i:n] are decoded bytes not yet read
}

// next returns the next decoded byte, and false at the closing quote.
func (r *keyReader) next() (byte, bool) {
	if r.i < r.n {
		c := r.rune[r.i]
		r.i++
		return c, true
	}
	switch c := r.src[r.pos]; c {
	case '"':
		return 0, false
	case '\\':
		ru, size, _ := decodeEscape(r.src, r.pos)
		r.pos += size
		r.n = utf8.EncodeRune(r.rune[:], ru)
		r.i = 1
		return r.rune[0], true
	default:
		r.pos++
		return c, true
	}
}

// compareKeys compares the decoded values of the checked JSON strings whose
// opening quotes are at src[a] and src[b], byte by byte as strings.Compare
// does (which orders UTF-8 text by code point).
func compareKeys(src []byte, a, b uint32) int {
	i, j := int(a)+1, int(b)+1
	for src[i] == src[j] && src[i] != '"' && src[i] != '\\' {
		i++
		j++
	}
	if src[i] == '"' && src[j] == '"' {
		return 0
	}
	ra, rb := keyReader{src: src, pos: i}, keyReader{src: src, pos: j}
	for {
		ca, okA := ra.next()
		cb, okB := rb.next()
		switch {
		case !okA && !okB:
			return 0
		case !okA:
			return -1
		case !okB:
			return 1
		case ca != cb:
			return int(ca) - int(cb)
		}
	}
}
