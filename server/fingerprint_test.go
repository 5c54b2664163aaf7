package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite golden files in testdata")

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()

	tests := []struct {
		in, want string
	}{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" {\n\t\"a\" : [ 1 , 2 ] } \r\n", `{"a":[1,2]}`},
		{`{"a":{"z":null,"y":true,"x":false}}`, `{"a":{"x":false,"y":true,"z":null}}`},
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`"x"`, `"x"`},
		{`{"é":1,"e":2,"z":3,"😀":4,"":5}`, `{"":5,"e":2,"z":3,"é":1,"😀":4}`},
		// Numbers: one canonical decimal per value, exact.
		{`1`, `1`},
		{`1.0`, `1`},
		{`10e-1`, `1`},
		{`1E0`, `1`},
		{`0.1e1`, `1`},
		{`100`, `100`},
		{`1e2`, `100`},
		{`1.5e3`, `1500`},
		{`-0`, `0`},
		{`-0.0e5`, `0`},
		{`0.1`, `0.1`},
		{`-12.340`, `-12.34`},
		{`0.000001`, `0.000001`},
		{`1e-7`, `1e-7`},
		{`1.25e-10`, `1.25e-10`},
		{`1e20`, `100000000000000000000`},
		{`1e21`, `1e+21`},
		{`12345678901234567890`, `12345678901234567890`},
		{`123456789012345678901234567890`, `1.2345678901234567890123456789e+29`},
		{`9007199254740993`, `9007199254740993`}, // not representable as float64
		{`0.30000000000000000001`, `0.30000000000000000001`},
		{`40.00`, `40`},
		{`4000`, `4000`},
		// Strings: minimal escaping, escapes decoded.
		{`"\u0041\/\u00e9"`, `"A/é"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"a\"b\\c\n\t\r\b\f"`, `"a\"b\\c\n\t\r\b\f"`},
		{`"\u001f\u007f"`, "\"\\u001f\x7f\""},
		{"\"\u2028\"", "\"\u2028\""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := canonicalJSON([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got), "got %s want %s", got, tt.want)
			again, err := canonicalJSON(got)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again), "canonical form is not a fixed point")
		})
	}
}

func TestCanonicalJSON_Errors(t *testing.T) {
	t.Parallel()

	deep := strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2)
	for _, in := range []string{
		``, ` `, `{`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.1`, `+1`, `1e`, `1e+`, `-`,
		`NaN`, `Infinity`, `tru`, `nul`, `"abc`, "\"a\x01b\"", `"\x"`, `"\u12"`, `"\uZZZZ"`,
		`{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`,
		"\"\xff\"", "{\"\xc3\":1}",
		`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`,
		`1 2`, `{} x`,
		`1e99999999999`,
		deep,
	} {
		t.Run(in[:min(len(in), 40)], func(t *testing.T) {
			t.Parallel()
			got, err := canonicalJSON([]byte(in))
			require.ErrorIs(t, err, errNotCanonicalizable, "got %q", got)
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()

	fp := func(method, target, contentType, body string) []byte {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		sum, version := fingerprint(r, []byte(body))
		require.Equal(t, fingerprintVersion, version)
		require.Len(t, sum, 32)
		return sum
	}
	base := fp("POST", "/payments", "application/json", `{"amount":4000,"currency":"EUR"}`)

	t.Run("KeyOrderAndWhitespaceDoNotMatter", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, base, fp("POST", "/payments", "application/json; charset=utf-8", "{ \"currency\": \"EUR\",\n \"amount\": 4000.0 }"))
		require.Equal(t, base, fp("POST", "/payments", "application/vnd.api+json", `{"currency":"EUR","amount":4e3}`))
	})
	t.Run("HostIsNotPart", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, base, fp("POST", "http://other.example/payments", "application/json", `{"amount":4000,"currency":"EUR"}`))
	})
	t.Run("Differences", func(t *testing.T) {
		t.Parallel()
		for name, got := range map[string][]byte{
			"amount":       fp("POST", "/payments", "application/json", `{"amount":40.00,"currency":"EUR"}`),
			"method":       fp("PUT", "/payments", "application/json", `{"amount":4000,"currency":"EUR"}`),
			"path":         fp("POST", "/refunds", "application/json", `{"amount":4000,"currency":"EUR"}`),
			"query":        fp("POST", "/payments?x=1", "application/json", `{"amount":4000,"currency":"EUR"}`),
			"raw":          fp("POST", "/payments", "text/plain", `{"amount":4000,"currency":"EUR"}`),
			"noType":       fp("POST", "/payments", "", `{"amount":4000,"currency":"EUR"}`),
			"duplicateKey": fp("POST", "/payments", "application/json", `{"amount":4000,"currency":"EUR","currency":"EUR"}`),
		} {
			require.NotEqual(t, base, got, "%s: fingerprints must differ", name)
		}
	})
	t.Run("RawBodiesAreByteExact", func(t *testing.T) {
		t.Parallel()
		require.NotEqual(t, fp("POST", "/x", "text/plain", "a b"), fp("POST", "/x", "text/plain", "a  b"))
		require.Equal(t, fp("POST", "/x", "text/plain", "a b"), fp("POST", "/x", "text/plain", "a b"))
		// Invalid JSON under a JSON content type is hashed raw, not rejected.
		require.NotEqual(t, fp("POST", "/x", "application/json", "{"), fp("POST", "/x", "application/json", "{ "))
	})
}

// TestFingerprint_AllocatesAtMostFourTimesTheBody measures the heap with
// runtime counters, so it does not run in parallel with other tests. A 1 MiB
// body of [0,0,…] used to cost 191 MiB.
func TestFingerprint_AllocatesAtMostFourTimesTheBody(t *testing.T) { //nolint:paralleltest // measures the heap
	body := []byte("[" + strings.Repeat("0,", 1<<19) + "0]")
	r := httptest.NewRequest("POST", "/payments", nil)
	r.Header.Set("Content-Type", "application/json")
	fingerprint(r, body) // warm up
	const runs = 4
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		fingerprint(r, body)
	}
	runtime.ReadMemStats(&after)
	perByte := float64(after.TotalAlloc-before.TotalAlloc) / runs / float64(len(body))
	require.LessOrEqual(t, perByte, 4.0, "got %.1f bytes allocated per byte of body want at most 4", perByte)
}

// fingerprintGolden is one case of testdata/fingerprint_golden.json: version 1
// of the canonical form must never change, since stored fingerprints depend
// on it.
type fingerprintGolden struct {
	Name        string `json:"name"`
	Method      string `json:"method"`
	Target      string `json:"target"`
	ContentType string `json:"content_type,omitempty"`
	Body        string `json:"body"`
	Version     int    `json:"version,omitempty"` // 1 when absent
	SHA256      string `json:"sha256"`
}

func TestFingerprint_Golden(t *testing.T) {
	t.Parallel()

	path := filepath.Join("testdata", "fingerprint_golden.json")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var cases []fingerprintGolden
	require.NoError(t, json.Unmarshal(raw, &cases))
	require.NotEmpty(t, cases)
	for i, c := range cases {
		r := httptest.NewRequest(c.Method, c.Target, strings.NewReader(c.Body))
		if c.ContentType != "" {
			r.Header.Set("Content-Type", c.ContentType)
		}
		version := c.Version
		if version == 0 {
			version = 1
		}
		got := hex.EncodeToString(fingerprintRequest(r, []byte(c.Body)).at(version))
		if *updateGolden {
			cases[i].SHA256 = got
			continue
		}
		require.Equal(t, c.SHA256, got, "%s: fingerprint of version 1 changed", c.Name)
	}
	if *updateGolden {
		out, err := json.MarshalIndent(cases, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
	}
}

func TestFingerprint_Form(t *testing.T) {
	t.Parallel()
	// The documented form, spelled out once by hand.
	r := httptest.NewRequest("POST", "/a%2Fb?q=1", strings.NewReader(`{"b":1, "a":2}`))
	r.Header.Set("Content-Type", "application/json")
	f := fingerprintRequest(r, []byte(`{"b":1, "a":2}`))
	want := sha256Hex("idemkit-fp-v1\nPOST\n/a%2Fb?q=1\njson\n{\"a\":2,\"b\":1}")
	require.Equal(t, want, hex.EncodeToString(f.at(1)))
	want = sha256Hex("idemkit-fp-v2\nPOST\n/a%2Fb?q=1\njson\n{\"a\":2,\"b\":1}")
	require.Equal(t, want, hex.EncodeToString(f.at(2)))

	r = httptest.NewRequest("PATCH", "/x", strings.NewReader("abc"))
	f = fingerprintRequest(r, []byte("abc"))
	require.Equal(t, sha256Hex("idemkit-fp-v1\nPATCH\n/x?\nraw\nabc"), hex.EncodeToString(f.at(1)))
	require.Equal(t, sha256Hex("idemkit-fp-v2\nPATCH\n/x\nraw\nabc"), hex.EncodeToString(f.at(2)))

	// Version 2 is the target as sent: a StripPrefix does not change it,
	// an absolute-form target loses its scheme and authority.
	r = httptest.NewRequest("POST", "/api/x?q=1", strings.NewReader("abc"))
	r.URL.Path = "/x"
	require.Equal(t, sha256Hex("idemkit-fp-v2\nPOST\n/api/x?q=1\nraw\nabc"), hex.EncodeToString(fingerprintRequest(r, []byte("abc")).at(2)))
	r = httptest.NewRequest("POST", "http://h.example:8080/y?z", strings.NewReader("abc"))
	require.Equal(t, sha256Hex("idemkit-fp-v2\nPOST\n/y?z\nraw\nabc"), hex.EncodeToString(fingerprintRequest(r, []byte("abc")).at(2)))
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1,"b":[true,false,null]}`, `{"b":[true,false,null],"a":1.0}`},
		{`1`, `10e-1`},
		{`123456789012345678901234567890`, `1.23456789012345678901234567890e29`},
		{`"\u00e9"`, `"é"`},
		{`{"a":1,"a":1}`, `{"a":1}`},
		{`[0.1,0.2]`, `[1e-1,2E-1]`},
		{`-0`, `0`},
		{`"\ud83d\ude00"`, `"😀"`},
		{"\"\xff\"", `""`},
		{`{"x":"y"}`, `{"x":"z"}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, errA := canonicalJSON(a)
		cb, errB := canonicalJSON(b)
		checkCanonical(t, a, ca, errA)
		checkCanonical(t, b, cb, errB)
		if errA == nil {
			// Re-spacing the text never changes the canonical form.
			var indented bytes.Buffer
			if json.Indent(&indented, a, " ", "\t") == nil {
				ci, err := canonicalJSON(indented.Bytes())
				if err != nil || !bytes.Equal(ci, ca) {
					t.Fatalf("%q indented canonicalises to %q, %v; want %q", a, ci, err, ca)
				}
			}
		}
		if errA != nil || errB != nil {
			return
		}
		eq, ok := stdJSONEqual(a, b)
		if !ok {
			return
		}
		if eq != bytes.Equal(ca, cb) {
			t.Fatalf("%q and %q: equal values %v, but canonical forms %q and %q", a, b, eq, ca, cb)
		}
	})
}

func checkCanonical(t *testing.T, in, out []byte, err error) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, errNotCanonicalizable)
		if json.Valid(in) {
			// encoding/json accepts these; we refuse them on purpose.
			msg := err.Error()
			if !strings.Contains(msg, "duplicate") && !strings.Contains(msg, "UTF-8") && !strings.Contains(msg, "surrogate") &&
				!strings.Contains(msg, "nesting") && !strings.Contains(msg, "exponent") {
				t.Fatalf("CanonicalJSON(%q): %v, but encoding/json accepts it", in, err)
			}
		}
		return
	}
	if !json.Valid(out) {
		t.Fatalf("CanonicalJSON(%q) = %q: not valid JSON", in, out)
	}
	again, err := canonicalJSON(out)
	if err != nil || !bytes.Equal(again, out) {
		t.Fatalf("CanonicalJSON is not idempotent: %q -> %q -> %q, %v", in, out, again, err)
	}
	if eq, ok := stdJSONEqual(in, out); ok && !eq {
		t.Fatalf("CanonicalJSON(%q) = %q: encoding/json decodes them to different values", in, out)
	}
}

// stdJSONEqual compares two JSON texts with encoding/json, numbers as exact
// rationals. ok is false when a number is too large to compare cheaply.
func stdJSONEqual(a, b []byte) (eq, ok bool) {
	va, okA := stdDecode(a)
	vb, okB := stdDecode(b)
	if !okA || !okB {
		return false, false
	}
	return stdEqual(va, vb)
}

func stdDecode(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func stdEqual(a, b any) (eq, ok bool) {
	switch a := a.(type) {
	case json.Number:
		b, isNum := b.(json.Number)
		if !isNum {
			return false, true
		}
		ra, okA := smallRat(string(a))
		rb, okB := smallRat(string(b))
		if !okA || !okB {
			return false, false
		}
		return ra.Cmp(rb) == 0, true
	case map[string]any:
		b, isMap := b.(map[string]any)
		if !isMap || len(a) != len(b) {
			return false, true
		}
		for k, va := range a {
			vb, found := b[k]
			if !found {
				return false, true
			}
			if eq, ok := stdEqual(va, vb); !ok || !eq {
				return eq, ok
			}
		}
		return true, true
	case []any:
		b, isSlice := b.([]any)
		if !isSlice || len(a) != len(b) {
			return false, true
		}
		for i := range a {
			if eq, ok := stdEqual(a[i], b[i]); !ok || !eq {
				return eq, ok
			}
		}
		return true, true
	default:
		return a == b, true
	}
}

func smallRat(s string) (*big.Rat, bool) {
	if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-0")) > 3 {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The canonical form of a few payment bodies, and a body that has none.
func TestCanonicalJSON_PaymentBodies(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"currency": "EUR", "amount": 4000.0}`:            `{"amount":4000,"currency":"EUR"}`,
		`{"amount":4e3,"currency":"EUR"}`:                  `{"amount":4000,"currency":"EUR"}`,
		`{"n": 123456789012345678901234567890, "f": 0.10}`: `{"f":0.1,"n":1.2345678901234567890123456789e+29}`,
	} {
		out, err := canonicalJSON([]byte(in))
		require.NoError(t, err)
		require.Equal(t, want, string(out), "canonical form of %s", in)
	}
	_, err := canonicalJSON([]byte(`{"a":1,"a":2}`))
	require.ErrorIs(t, err, errNotCanonicalizable)
}

func BenchmarkCanonicalJSON(b *testing.B) {
	in := []byte(`{"currency":"EUR","amount":4000,"metadata":{"order":"ord_123","items":[1,2,3.50,"x"]},"description":"caf\u00e9"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := canonicalJSON(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFingerprint measures a request's fingerprint: the canonical JSON
// of a small payment body and its SHA-256 (versions before the current
// one are computed only when a record of theirs is met).
func BenchmarkFingerprint(b *testing.B) {
	body := []byte(`{"amount":1000,"currency":"eur","source":"tok_visa"}`)
	r := httptest.NewRequest("POST", "/v1/payments", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	b.ReportAllocs()
	for b.Loop() {
		_ = fingerprintRequest(r, body)
	}
}
