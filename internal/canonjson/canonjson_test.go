package canonjson

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// canonical returns the canonical form of src written through a Document.
func canonical(src []byte, lim *Limits) ([]byte, error) {
	d, err := Parse(src, lim)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	n, err := d.WriteTo(&out)
	if err != nil {
		return nil, err
	}
	if n != int64(out.Len()) {
		return nil, errors.New("WriteTo miscounted")
	}
	return out.Bytes(), nil
}

func TestWriteTo_CanonicalForm(t *testing.T) {
	t.Parallel()

	tests := []struct {
		in, want string
	}{
		{`{"y":1,"x":2}`, `{"x":2,"y":1}`},
		{"\r\n[ {\t\"q\" : [ true , null ] } ] ", `[{"q":[true,null]}]`},
		{`{ "c" : { "b" : 1 , "a" : 2 } , "b" : [ { "y" : 0 , "x" : 0 } ] , "a" : { } }`, `{"a":{},"b":[{"x":0,"y":0}],"c":{"a":2,"b":1}}`},
		{`{"b":{"d":1,"c":2},"a":[]}`, `{"a":[],"b":{"c":2,"d":1}}`},
		{`{"a":1,"b":2,"c":3}`, `{"a":1,"b":2,"c":3}`},
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"a\u0000":1,"a":2}`, `{"a":2,"a\u0000":1}`},
		{`{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{`{}`, `{}`},
		{`[ ]`, `[]`},
		{`{ }`, `{}`},
		{`{"\ud83d\ude00":1,"\uffff":2,"é":3}`, `{"é":3,"￿":2,"😀":1}`},
		// Numbers (more cases in server/fingerprint_test.go, and every
		// spelling in the differential tests against the reference).
		{`-0.0e5`, `0`},
		{`-12.340`, `-12.34`},
		{`1e21`, `1e+21`},
		{`123456789012345678901234567890`, `1.2345678901234567890123456789e+29`},
		{`1000000000000000000000`, `1e+21`},
		{`-100000000000000000000`, `-100000000000000000000`},
		{`0.5e1`, `5`},
		{`1e1000000000`, `1e+1000000000`},
		{`1e-1000000000`, `1e-1000000000`},
		{`1e0000000000001`, `10`},
		{`-1.0e-6`, `-0.000001`},
		{`0.00000012e1`, `0.0000012`},
		{`1000e-3`, `1`},
		// Strings: minimal escaping, escapes decoded.
		{`"\u001f\u007f\/\b"`, "\"\\u001f\x7f/\\b\""},
		{`"\u0000"`, `"\u0000"`},
		{`"\u0022\u005C"`, `"\"\\"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := canonical([]byte(tt.in), nil)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got), "got %s want %s", got, tt.want)
			again, err := canonical(got, nil)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again), "canonical form is not a fixed point")
		})
	}
}

func TestParse_Errors(t *testing.T) {
	t.Parallel()

	deep := strings.Repeat("[", MaxDepthDefault+2) + strings.Repeat("]", MaxDepthDefault+2)
	tests := []struct {
		in   string
		want error
	}{
		{``, ErrSyntax}, {` `, ErrSyntax}, {`{`, ErrSyntax}, {`[`, ErrSyntax}, {`[1`, ErrSyntax}, {`{"a":1`, ErrSyntax},
		{`[1,]`, ErrSyntax}, {`{"a":1,}`, ErrSyntax}, {`{"a" 1}`, ErrSyntax}, {`{a:1}`, ErrSyntax}, {`{"a"}`, ErrSyntax},
		{`[1 2]`, ErrSyntax}, {`{"a":1 "b":2}`, ErrSyntax}, {`[}`, ErrSyntax}, {`{]`, ErrSyntax},
		{`01`, ErrSyntax}, {`1.`, ErrSyntax}, {`.1`, ErrSyntax}, {`+1`, ErrSyntax}, {`1e`, ErrSyntax}, {`1e+`, ErrSyntax},
		{`-`, ErrSyntax}, {`-a`, ErrSyntax}, {`NaN`, ErrSyntax}, {`Infinity`, ErrSyntax}, {`tru`, ErrSyntax}, {`nul`, ErrSyntax},
		{`True`, ErrSyntax}, {`"abc`, ErrSyntax}, {"\"a\x01b\"", ErrSyntax}, {`"\x"`, ErrSyntax}, {`"\`, ErrSyntax},
		{`"\u12"`, ErrSyntax}, {`"\uZZZZ"`, ErrSyntax}, {"\"\xff\"", ErrSyntax}, {"{\"\xc3\":1}", ErrSyntax},
		{`"\ud800"`, ErrSyntax}, {`"\udc00"`, ErrSyntax}, {`"\ud800\u0041"`, ErrSyntax}, {`"\ud800\u"`, ErrSyntax},
		{`"\ud800\`, ErrSyntax}, {`"\ud800\ud800"`, ErrSyntax},
		{`1 2`, ErrSyntax}, {`{} x`, ErrSyntax},
		{`{"a":1,"a":2}`, ErrDuplicateKey}, {`{"a":{"b":1,"b":1}}`, ErrDuplicateKey},
		{`{"b":1,"a":2,"b":3}`, ErrDuplicateKey}, {`{"a":1,"\u0061":2}`, ErrDuplicateKey}, {`{"b":1,"\u0062":2}`, ErrDuplicateKey},
		{`{"c":0,"b":1,"a":2,"b":3}`, ErrDuplicateKey},
		{`1e99999999999`, ErrExponentRange}, {`1e1000000001`, ErrExponentRange}, {`0e-1000000001`, ErrExponentRange},
		{deep, ErrTooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 40)], func(t *testing.T) {
			t.Parallel()
			d, err := Parse([]byte(tt.in), nil)
			require.ErrorIs(t, err, tt.want, "got %v", d)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.LessOrEqual(t, e.Offset, len(tt.in))
			_, refErr := referenceCanonical([]byte(tt.in))
			require.Error(t, refErr, "the reference accepts what Parse rejects")
		})
	}
}

func TestParse_Limits(t *testing.T) {
	t.Parallel()

	nest := func(open, close string, n int) []byte {
		return []byte(strings.Repeat(open, n) + strings.Repeat(close, n))
	}
	t.Run("DepthDefault", func(t *testing.T) {
		t.Parallel()
		// The innermost empty array is at depth 1000; an element in it would be at 1001.
		_, err := Parse(nest("[", "]", MaxDepthDefault+1), nil)
		require.NoError(t, err)
		_, err = Parse(nest("[", "]", MaxDepthDefault+2), nil)
		require.ErrorIs(t, err, ErrTooDeep)
		_, err = Parse([]byte(strings.Repeat("[", MaxDepthDefault+1)+"1"+strings.Repeat("]", MaxDepthDefault+1)), nil)
		require.ErrorIs(t, err, ErrTooDeep)
		_, err = Parse(nest(`{"a":`, "}", MaxDepthDefault+1), nil)
		require.ErrorIs(t, err, ErrTooDeep)
		_, err = Parse([]byte(strings.Repeat(`{"a":`, MaxDepthDefault)+"{}"+strings.Repeat("}", MaxDepthDefault)), nil)
		require.NoError(t, err)
	})
	t.Run("DepthSet", func(t *testing.T) {
		t.Parallel()
		lim := &Limits{MaxDepth: 1}
		_, err := Parse([]byte(`[[]]`), lim)
		require.NoError(t, err)
		_, err = Parse([]byte(`[[1]]`), lim)
		require.ErrorIs(t, err, ErrTooDeep)
		_, err = Parse([]byte(`{"a":{"b":1}}`), lim)
		require.ErrorIs(t, err, ErrTooDeep)
	})
	t.Run("Bytes", func(t *testing.T) {
		t.Parallel()
		lim := &Limits{MaxBytes: 8}
		_, err := Parse([]byte(`"123456"`), lim)
		require.NoError(t, err)
		_, err = Parse([]byte(`"1234567"`), lim)
		require.ErrorIs(t, err, ErrTooLarge)
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, 8, e.Offset)
	})
	t.Run("HostileUnboundedDepth", func(t *testing.T) {
		t.Parallel()
		// A million open brackets fail at the limit, without a deep stack.
		_, err := Parse([]byte(strings.Repeat("[", 1<<20)), nil)
		require.ErrorIs(t, err, ErrTooDeep)
		_, err = Parse([]byte(strings.Repeat("[", 1<<20)), &Limits{MaxDepth: 1 << 30})
		require.ErrorIs(t, err, ErrSyntax)
	})
}

// failingWriter accepts n bytes, then fails.
type failingWriter struct{ n int }

var errWriter = errors.New("writer failed")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		n := w.n
		w.n = 0
		return n, errWriter
	}
	w.n -= len(p)
	return len(p), nil
}

func TestWriteTo_StopsAtWriterError(t *testing.T) {
	t.Parallel()

	src := []byte(`{"b":"` + strings.Repeat("x", 10000) + `","a":[1,2,3]}`)
	d, err := Parse(src, nil)
	require.NoError(t, err)
	n, err := d.WriteTo(&failingWriter{n: 100})
	require.ErrorIs(t, err, errWriter)
	require.Equal(t, int64(100), n)
}

func TestWriteTo_ReusableAndConcurrent(t *testing.T) {
	t.Parallel()

	d, err := Parse([]byte(`{"b":[{"d":1,"c":2,"e":3}],"a":{"y":1,"x":2}}`), nil)
	require.NoError(t, err)
	const want = `{"a":{"x":2,"y":1},"b":[{"c":2,"d":1,"e":3}]}`
	outs := make([]bytes.Buffer, 4)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { _, _ = d.WriteTo(&outs[i]) })
	}
	wg.Wait()
	for i := range outs {
		require.Equal(t, want, outs[i].String())
	}
}

// hostileShapes are texts of about size bytes shaped to cost a canonicaliser
// the most; normal is a payment body.
func hostileShapes(size int) map[string][]byte {
	repeat := func(open, item, sep, close string) []byte {
		var b bytes.Buffer
		b.WriteString(open)
		for i := 0; b.Len() < size; i++ {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(strings.ReplaceAll(item, "#", strconv.Itoa(i)))
		}
		b.WriteString(close)
		return b.Bytes()
	}
	manyKeys := func(reverse bool) []byte {
		n := 0
		for l := 1; l < size; n++ {
			l += len(`"k0000000":0,`)
		}
		var b bytes.Buffer
		b.WriteByte('{')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			k := i
			if reverse {
				k = n - 1 - i
			}
			b.WriteString(fmt.Sprintf(`"k%07d":0`, k))
		}
		b.WriteByte('}')
		return b.Bytes()
	}
	return map[string][]byte{
		"Zeros":            repeat("[", "0", ",", "]"),
		"DeepArrays":       []byte(strings.Repeat("[", MaxDepthDefault+1) + strings.Repeat("]", MaxDepthDefault+1)),
		"DeepObjects":      []byte(strings.Repeat(`{"a":`, MaxDepthDefault) + "{}" + strings.Repeat("}", MaxDepthDefault)),
		"ManyKeysSorted":   manyKeys(false),
		"ManyKeysReversed": manyKeys(true),
		"SmallObjects":     repeat("[", `{"b":0,"a":0}`, ",", "]"),
		"SmallObjects3":    repeat("[", `{"c":0,"b":0,"a":0}`, ",", "]"),
		"LongString":       []byte(`"` + strings.Repeat("x", size) + `"`),
		"EscapedString":    []byte(`"` + strings.Repeat(`\u00e9`, size/6) + `"`),
		"LongNumber":       []byte(strings.Repeat("9", size) + "e-5"),
		"BigExponents":     repeat("[", "1e20", ",", "]"),
		"Payment":          []byte(`{"currency":"EUR","amount":4000,"metadata":{"order":"ord_123","items":[1,2,3.50,"x"]},"description":"caf\u00e9"}`),
	}
}

func TestWriteTo_HostileShapesMatchReference(t *testing.T) {
	t.Parallel()

	for name, src := range hostileShapes(64 << 10) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := referenceCanonical(src)
			require.NoError(t, err)
			got, err := canonical(src, nil)
			require.NoError(t, err)
			require.True(t, bytes.Equal(want, got), "output differs from the reference")
		})
	}
}

// TestWriteTo_AllocatesAtMostFourTimesTheText measures heap allocations with
// runtime counters, so it does not run in parallel with other tests.
func TestWriteTo_AllocatesAtMostFourTimesTheText(t *testing.T) { //nolint:paralleltest // measures the heap
	for name, src := range hostileShapes(256 << 10) {
		if len(src) < 64<<10 {
			continue // deep nesting and the payment body: a constant, see the benchmark
		}
		perByte := allocatedPerByte(src, func() {
			d, err := Parse(src, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.WriteTo(sha256.New()); err != nil {
				t.Fatal(err)
			}
		})
		require.LessOrEqual(t, perByte, 4.0, "%s: %.2f bytes allocated per byte of text", name, perByte)
	}
}

// corpusInputs returns the inputs of the server's fuzz corpus and golden
// fingerprint file, which seed the differential fuzz target.
func corpusInputs(t testing.TB) [][]byte {
	var out [][]byte
	files, err := filepath.Glob(filepath.Join("..", "..", "server", "testdata", "fuzz", "FuzzCanonicalJSON", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(raw), "\n") {
			if s, ok := strings.CutPrefix(line, "[]byte("); ok {
				v, err := strconv.Unquote(strings.TrimSuffix(s, ")"))
				require.NoError(t, err, "%s: %s", f, line)
				out = append(out, []byte(v))
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "server", "testdata", "fingerprint_golden.json"))
	require.NoError(t, err)
	for _, part := range strings.Split(string(raw), `"body": `)[1:] {
		end := strings.Index(part, "\",\n")
		v, err := strconv.Unquote(part[:end+1])
		require.NoError(t, err)
		out = append(out, []byte(v))
	}
	return out
}

func FuzzCanonical_MatchesReference(f *testing.F) {
	for _, in := range corpusInputs(f) {
		f.Add(in)
	}
	for _, s := range []string{
		`{"b":1,"a":2}`, `{"c":[1,{"z":0,"y":[{"q":1,"p":2}]}],"b":{},"a":[]}`, `{"a":1,"b":2,"c":3}`,
		`{"c":1,"a":2,"b":3}`, `{"b":1,"a":2,"b":3}`, `{"\u0062":1,"a":2}`, `{"a\u0000":1,"a":2}`,
		`{"\ud83d\ude00":1,"\uffff":2,"\u00e9":3}`, `{"a":1,"\u0061":2}`,
		`1e1000000000`, `1e1000000001`, `-0.0e-0`, `0.000001`, `1e-7`, `1e21`, `1e20`, `123.456e-2`, `1E+2`,
		`"\u0000\u001f\u007f\/\b\f\n\r\t\"\\"`, `"\ud800\udc00"`, `"\udbff\udfff"`, `"\ud800\ud800"`, "\"\xed\xa0\x80\"",
		"\"\xef\xbf\xbd\"", " \t\n\r[ 1 , { \"a\" : null } ]\r\n ", `[1,]`, `{"a":}`, `[-]`, `[01]`, `[1.e1]`,
		string(hostileShapes(200)["SmallObjects3"]), string(hostileShapes(300)["ManyKeysReversed"]),
		strings.Repeat("[", MaxDepthDefault+1) + strings.Repeat("]", MaxDepthDefault+1),
		strings.Repeat("[", MaxDepthDefault+2) + strings.Repeat("]", MaxDepthDefault+2),
		strings.Repeat(`{"a":`, MaxDepthDefault) + "1" + strings.Repeat("}", MaxDepthDefault),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want, refErr := referenceCanonical(in)
		got, err := canonical(in, nil)
		if (err == nil) != (refErr == nil) {
			t.Fatalf("%q: got error %v, reference error %v", in, err, refErr)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: error %v is not an *Error", in, err)
			}
			if wantErr := referenceSentinel(refErr); !errors.Is(err, wantErr) {
				t.Fatalf("%q: error %v, want %v (reference: %v)", in, err, wantErr, refErr)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: got %q, reference %q", in, got, want)
		}
		if !utf8.Valid(got) {
			t.Fatalf("%q: output %q is not UTF-8", in, got)
		}
		// The canonical form denotes the same value as the text (the check
		// server.FuzzCanonicalJSON made with the parser's tree). Its
		// exponents may be past the limit on written ones by up to the
		// number of digits ("10e1000000000" is "1e+1000000001"), so it is
		// read back with a limit that wide.
		p1 := jsonParser{in: in}
		p1.skipSpace()
		v1, err1 := p1.value(0)
		p2 := jsonParser{in: got, maxExponent: maxJSONExponent + int64(len(in))}
		v2, err2 := p2.value(0)
		if err1 != nil || err2 != nil || !v1.equal(&v2) {
			t.Fatalf("%q: canonical form %q denotes a different value (%v, %v)", in, got, err1, err2)
		}
	})
}

// referenceSentinel classifies an error of the reference implementation.
func referenceSentinel(err error) error {
	switch msg := err.Error(); {
	case strings.Contains(msg, "duplicate object key"):
		return ErrDuplicateKey
	case strings.Contains(msg, "nesting deeper"):
		return ErrTooDeep
	case strings.Contains(msg, "exponent out of range"):
		return ErrExponentRange
	default:
		return ErrSyntax
	}
}
