package canonjson

import (
	"fmt"
	"strconv"
)

// number is a JSON number as written: (-)intPart.frac × 10^exp.
type number struct {
	neg           bool
	intPart, frac []byte // digits, slices of the text
	exp           int64  // the exponent as written, |exp| ≤ maxExponent
}

// scanNumber reads the number that starts at src[pos] and returns it with
// the offset just after it.
func scanNumber(src []byte, pos int) (number, int, error) {
	start := pos
	var n number
	if src[pos] == '-' {
		n.neg = true
		pos++
	}
	intStart := pos
	switch {
	case pos < len(src) && src[pos] == '0':
		pos++
	case pos < len(src) && src[pos] >= '1' && src[pos] <= '9':
		for pos < len(src) && isASCIIDigit(src[pos]) {
			pos++
		}
	default:
		return number{}, 0, numberError(pos, ErrSyntax, "invalid number")
	}
	n.intPart = src[intStart:pos]
	if pos < len(src) && src[pos] == '.' {
		pos++
		fs := pos
		for pos < len(src) && isASCIIDigit(src[pos]) {
			pos++
		}
		if pos == fs {
			return number{}, 0, numberError(pos, ErrSyntax, "invalid number: no digits after '.'")
		}
		n.frac = src[fs:pos]
	}
	if pos < len(src) && (src[pos] == 'e' || src[pos] == 'E') {
		pos++
		neg := false
		if pos < len(src) && (src[pos] == '+' || src[pos] == '-') {
			neg = src[pos] == '-'
			pos++
		}
		es := pos
		for pos < len(src) && isASCIIDigit(src[pos]) {
			if n.exp > maxExponent {
				return number{}, 0, numberError(pos, ErrExponentRange, fmt.Sprintf("exponent out of range in %q", src[start:pos]))
			}
			n.exp = n.exp*10 + int64(src[pos]-'0')
			pos++
		}
		if pos == es {
			return number{}, 0, numberError(pos, ErrSyntax, "invalid number: no digits in exponent")
		}
		if n.exp > maxExponent {
			return number{}, 0, numberError(pos, ErrExponentRange, "exponent out of range")
		}
		if neg {
			n.exp = -n.exp
		}
	}
	return n, pos, nil
}

func numberError(pos int, sentinel error, detail string) error {
	return &Error{Offset: pos, Err: sentinel, Detail: detail}
}

// zeros is long enough for the zeros of any number written without an
// exponent (at most 21).
const zeros = "000000000000000000000"

// writeNumber writes n in canonical form: the digits of intPart and frac
// without leading or trailing zeros, d, and the exponent e of d×10^e, written
// as documented in the package comment.
func (e *writer) writeNumber(n number) {
	if n.frac == nil && n.exp == 0 && len(n.intPart) <= 21 {
		// An integer as short as this is written as it is (0 for -0).
		if n.neg && n.intPart[0] != '0' {
			e.writeSmall("-")
		}
		e.write(n.intPart)
		return
	}
	a, b := n.intPart, n.frac // the digits are a followed by b
	exp := n.exp - int64(len(b))
	for len(a) > 0 && a[0] == '0' {
		a = a[1:]
	}
	if len(a) == 0 {
		for len(b) > 0 && b[0] == '0' {
			b = b[1:]
		}
	}
	if len(a)+len(b) == 0 {
		e.writeSmall("0")
		return
	}
	for len(b) > 0 && b[len(b)-1] == '0' {
		b = b[:len(b)-1]
		exp++
	}
	if len(b) == 0 {
		for a[len(a)-1] == '0' {
			a = a[:len(a)-1]
			exp++
		}
	}
	digits := func(from, to int64) { // writes digits [from, to) of a followed by b
		na := int64(len(a))
		if from < na {
			e.write(a[from:min(to, na)])
		}
		if to > na {
			e.write(b[max(from, na)-na : to-na])
		}
	}
	if n.neg {
		e.writeSmall("-")
	}
	nd := int64(len(a) + len(b))
	switch {
	case exp >= 0 && nd+exp <= 21:
		digits(0, nd)
		e.writeSmall(zeros[:exp])
	case exp < 0 && nd+exp > 0:
		digits(0, nd+exp)
		e.writeSmall(".")
		digits(nd+exp, nd)
	case exp < 0 && nd+exp > -6:
		e.writeSmall("0.")
		e.writeSmall(zeros[:-(nd + exp)])
		digits(0, nd)
	default:
		digits(0, 1)
		if nd > 1 {
			e.writeSmall(".")
			digits(1, nd)
		}
		x := exp + nd - 1
		e.writeSmall("e")
		if x >= 0 {
			e.writeSmall("+")
		}
		e.reserve(20)
		e.buf = strconv.AppendInt(e.buf, x, 10)
	}
}
