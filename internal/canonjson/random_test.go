package canonjson

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// randomText writes a random JSON text: nested objects with keys in random
// order (some spelled with escapes, some duplicated), numbers in every
// spelling, escaped strings and random white space.
func randomText(r *rand.Rand, b *bytes.Buffer, depth int) {
	space := func() {
		for r.IntN(4) == 0 {
			b.WriteByte(" \t\n\r"[r.IntN(4)])
		}
	}
	space()
	switch k := r.IntN(10); {
	case k < 3 && depth < 6:
		b.WriteByte('{')
		n := r.IntN(6)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			space()
			randomString(r, b, "abé😀\u0000", 3)
			space()
			b.WriteByte(':')
			randomText(r, b, depth+1)
		}
		space()
		b.WriteByte('}')
	case k < 5 && depth < 6:
		b.WriteByte('[')
		n := r.IntN(5)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			randomText(r, b, depth+1)
		}
		space()
		b.WriteByte(']')
	case k < 6:
		randomString(r, b, "xy\"\\/\n\u001f\u007f\u2028é😀", 8)
	case k < 7:
		b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
	default:
		if r.IntN(3) == 0 {
			b.WriteByte('-')
		}
		digits := func(n int) {
			for range n {
				b.WriteByte("0000123456789"[r.IntN(13)])
			}
		}
		if r.IntN(3) == 0 {
			b.WriteByte('0')
		} else {
			b.WriteByte("123456789"[r.IntN(9)])
			digits(r.IntN(25))
		}
		if r.IntN(2) == 0 {
			b.WriteByte('.')
			digits(1 + r.IntN(25))
		}
		if r.IntN(2) == 0 {
			b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)])
			b.WriteString(strconv.Itoa(r.IntN(40)))
		}
	}
	space()
}

// randomString writes a string of up to n runes from alphabet, each maybe
// written as an escape.
func randomString(r *rand.Rand, b *bytes.Buffer, alphabet string, n int) {
	runes := []rune(alphabet)
	b.WriteByte('"')
	for range r.IntN(n + 1) {
		c := runes[r.IntN(len(runes))]
		switch {
		case r.IntN(3) == 0 && c < 0x10000:
			b.WriteString(`\u` + strings.ToUpper(strconv.FormatInt(0x10000+int64(c), 16)[1:]))
		case r.IntN(3) == 0 && c >= 0x10000:
			c -= 0x10000
			b.WriteString(`\u` + strconv.FormatInt(0xd800+int64(c>>10), 16) + `\u` + strconv.FormatInt(0xdc00+int64(c&0x3ff), 16))
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20:
			b.WriteString(`\u001F`)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
}

func TestWriteTo_RandomTextsMatchReference(t *testing.T) {
	t.Parallel()

	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for i := range 20000 {
		var b bytes.Buffer
		randomText(r, &b, 0)
		in := b.Bytes()
		want, refErr := referenceCanonical(in)
		got, err := canonical(in, nil)
		require.Equal(t, refErr == nil, err == nil, "text %d %q: error %v, reference error %v", i, in, err, refErr)
		if err != nil {
			require.ErrorIs(t, err, referenceSentinel(refErr), "text %d %q: reference error %v", i, in, refErr)
			continue
		}
		accepted++
		require.Equal(t, string(want), string(got), "text %d %q", i, in)
	}
	require.Greater(t, accepted, 10000, "too few texts were accepted to test much")
}
