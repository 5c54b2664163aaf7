package conform

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"strconv"
	"strings"
)

// ChangeBody returns body changed the way the changed-body property
// changes it, and how, in words:
//
//   - JSON with a number: the first number in document order gets 1 added
//     ({"amount": 4000} becomes {"amount": 4001});
//   - JSON with no number but a string value: the first string value gets
//     "-changed" appended;
//   - a form (name=value&..., as Stripe's API takes) with an integer value:
//     the first integer value gets 1 added (amount=4000 becomes
//     amount=4001);
//   - anything else: "-changed" is appended to the body.
//
// Everything else stays byte for byte as given.
func ChangeBody(body []byte) (changed []byte, how string) {
	if json.Valid(body) {
		if c, how, ok := changeJSON(body); ok {
			return c, how
		}
	}
	if c, how, ok := changeForm(body); ok {
		return c, how
	}
	return append(bytes.Clone(body), "-changed"...), `"-changed" appended`
}

// changeForm adds 1 to the first integer value of a form body.
func changeForm(body []byte) ([]byte, string, bool) {
	parts := strings.Split(string(body), "&")
	for i, p := range parts {
		name, v, ok := strings.Cut(p, "=")
		if !ok || name == "" || v == "" || strings.Trim(v, "0123456789") != "" {
			continue
		}
		n, ok := new(big.Int).SetString(v, 10)
		if !ok {
			continue
		}
		next := n.Add(n, big.NewInt(1)).String()
		parts[i] = name + "=" + next
		return []byte(strings.Join(parts, "&")), "the first integer form value, " + name + "=" + v + ", made " + next, true
	}
	return nil, "", false
}

// changeJSON finds the first number (else the first string value) of a
// valid JSON document and changes it in place.
func changeJSON(body []byte) ([]byte, string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct{ obj, wantKey bool }
	var stack []frame
	consumed := func() { // a value ended: the enclosing object wants a key
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	firstString := -1
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) || err != nil {
			break
		}
		off := int(dec.InputOffset())
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				if n := len(stack); n > 0 && stack[n-1].obj {
					stack[n-1].wantKey = false
				}
				stack = append(stack, frame{obj: t == '{', wantKey: t == '{'})
				continue
			}
			stack = stack[:len(stack)-1]
			consumed()
		case string:
			if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
				stack[n-1].wantKey = false // a member name
				continue
			}
			if firstString < 0 {
				firstString = off - 1 // the closing quote
			}
			consumed()
		case json.Number:
			lit := string(t)
			start := off - len(lit)
			next := bumpNumber(lit)
			out := append(append(bytes.Clone(body[:start]), next...), body[off:]...)
			return out, "the first number, " + lit + ", made " + next, true
		default:
			consumed()
		}
	}
	if firstString < 0 {
		return nil, "", false
	}
	out := append(append(bytes.Clone(body[:firstString]), "-changed"...), body[firstString:]...)
	return out, `"-changed" appended to the first string value`, true
}

// bumpNumber adds 1 to a JSON number literal, exactly: the result is
// always another number, never the same one spelled differently (1e20 + 1
// in floating point would be 1e20 again). A literal whose exponent is
// beyond ±maxExponent gets a digit appended to its exponent instead,
// which also makes it another number.
func bumpNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		if n, ok := new(big.Int).SetString(lit, 10); ok {
			return n.Add(n, big.NewInt(1)).String()
		}
	}
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	e, err := strconv.Atoi(exp)
	if exp == "" {
		e, err = 0, nil
	}
	if err != nil || e > maxExponent || e < -maxExponent {
		return lit + "1"
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		return lit + "1"
	}
	r.Add(r, big.NewRat(1, 1))
	if r.IsInt() {
		return r.Num().String()
	}
	_, frac, _ := strings.Cut(mant, ".")
	return r.FloatString(max(0, len(frac)-e))
}

// maxExponent bounds the exponents bumpNumber computes with.
const maxExponent = 1000
