package wire

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"a\\b"`, "", `""`, " ", "a,b", `"a";p`, "\x00", "\x7f",
		"clé", `"clé"`, "\xff", `"\`, strings.Repeat("x", 256), `"` + strings.Repeat("x", 255) + `"`, " \t\"a\" \t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey([]string{v})
		if err != nil {
			var ke *KeyError
			if !errors.Is(err, ErrKeyInvalid) || !errors.As(err, &ke) || ke.Reason == "" {
				t.Fatalf("ParseKey(%q): got error %v, want a *KeyError matching ErrKeyInvalid", v, err)
			}
			return
		}
		if len(key) == 0 || len(key) > MaxKeyBytes {
			t.Fatalf("ParseKey(%q) = %q: length %d out of range", v, key, len(key))
		}
		if !utf8.ValidString(key) {
			t.Fatalf("ParseKey(%q) = %q: invalid UTF-8", v, key)
		}
		for _, r := range key {
			if unicode.IsControl(r) {
				t.Fatalf("ParseKey(%q) = %q: control character %U", v, key, r)
			}
		}
		if err := CheckKey(key, MaxKeyBytes); err != nil {
			t.Fatalf("ParseKey(%q) = %q, which CheckKey refuses: %v", v, key, err)
		}
		// Quoting a key that fits the sf-string alphabet gives the same key.
		if q, ok := QuoteString(key); ok {
			got, err := ParseKey([]string{q})
			if err != nil || got != key {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q (the quoted form of ParseKey(%q))", q, got, err, key, v)
			}
		}
		// Parsing is stable for bare keys that need no quotes.
		if !NeedsQuotes(key) {
			got, err := ParseKey([]string{key})
			if err != nil || got != key {
				t.Fatalf("ParseKey(%q) = %q, %v; want it unchanged", key, got, err)
			}
		}
	})
}

// FuzzParseString: the client's two ways of sending a key reach the
// server's parser as exactly that key. Every valid key QuoteString accepts,
// ParseKey returns unchanged from its quoted form; every key CheckKey
// accepts and that needs no quotes, ParseKey returns unchanged bare.
// ParseString inverts QuoteString, and what it parses quotes back to the
// same string.
func FuzzParseString(f *testing.F) {
	for _, k := range []string{"abc", " padded ", `"quoted"`, "a,b", `back\slash`, "ключ", "\"", ",", " ", "a\u0085b",
		"", `""`, `"\"`, `"a\b"`, "\t", strings.Repeat("k", 255), strings.Repeat("k", 256)} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		valid := CheckKey(k, MaxKeyBytes) == nil
		if q, ok := QuoteString(k); ok {
			got, err := ParseString(q)
			if err != nil || got != k {
				t.Fatalf("ParseString(QuoteString(%q) = %q) = %q, %v", k, q, got, err)
			}
			if valid {
				got, err := ParseKey([]string{q})
				if err != nil || got != k {
					t.Fatalf("key %q sent quoted as %q arrives as %q, %v", k, q, got, err)
				}
			}
		} else if printableASCII(k) {
			t.Fatalf("QuoteString(%q) refused printable ASCII", k)
		}
		if valid && !NeedsQuotes(k) {
			got, err := ParseKey([]string{k})
			if err != nil || got != k {
				t.Fatalf("key %q sent bare arrives as %q, %v", k, got, err)
			}
		}
		// k as a field value: what parses is canonical.
		if s, err := ParseString(k); err == nil {
			q, ok := QuoteString(s)
			if !ok {
				t.Fatalf("ParseString(%q) = %q, which QuoteString refuses", k, s)
			}
			if again, err := ParseString(q); err != nil || again != s {
				t.Fatalf("ParseString(%q) = %q; its quoted form %q parses as %q, %v", k, s, q, again, err)
			}
		} else if !errors.Is(err, ErrKeyInvalid) {
			t.Fatalf("ParseString(%q): error %v does not match ErrKeyInvalid", k, err)
		}
	})
}

// FuzzDecodeHeader: no input makes DecodeHeader panic, what it decodes
// encodes and decodes back to itself, and every header the client may store
// (token names, values net/http sends, not UTF-8 included) comes back byte
// for byte from EncodeHeader.
func FuzzDecodeHeader(f *testing.F) {
	f.Add([]byte{0, 1, 0}, "X-A", "v", "")
	f.Add([]byte(`{"A":["b"]}`), "Content-Type", "caf\xe9", "\xff\xfe\x80")
	f.Add([]byte{0, 1, 1, 1, 'a', 1, 1, '\n'}, "x-lower", "a\tb", "\u00e9\x85")
	f.Add(EncodeHeader(http.Header{"A": {"b", ""}, "B-C": {"\xff"}}), "a", "", " ")
	f.Add([]byte{0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, "", "\x00", "\r\n")
	f.Fuzz(func(t *testing.T, raw []byte, name, v1, v2 string) {
		if h, err := DecodeHeader(raw); err == nil {
			b := EncodeHeader(h)
			again, err := DecodeHeader(b)
			if err != nil {
				t.Fatalf("DecodeHeader(%q) = %q, whose encoding %q does not decode: %v", raw, h, b, err)
			}
			if !bytes.Equal(EncodeHeader(again), b) {
				t.Fatalf("DecodeHeader(%q) = %q does not round-trip: %q", raw, h, again)
			}
		} else if !errors.Is(err, ErrHeaderCodec) {
			t.Fatalf("DecodeHeader(%q): error %v does not match ErrHeaderCodec", raw, err)
		}
		if !ValidToken(name) || !validHeaderValue(v1) || !validHeaderValue(v2) {
			return
		}
		cn := http.CanonicalHeaderKey(name)
		h := http.Header{cn: {v1, v2}, "X-Second": {v2}}
		b := EncodeHeader(h)
		got, err := DecodeHeader(b)
		if err != nil {
			t.Fatalf("%q: DecodeHeader(EncodeHeader) failed: %v", h, err)
		}
		if len(got) != len(h) {
			t.Fatalf("%q round-trips as %q", h, got)
		}
		for k, vs := range h {
			gv := got[k]
			if len(gv) != len(vs) {
				t.Fatalf("%q round-trips as %q", h, got)
			}
			for i := range vs {
				if gv[i] != vs[i] {
					t.Fatalf("%s: value %q round-trips as %q", k, vs[i], gv[i])
				}
			}
		}
		if !bytes.Equal(EncodeHeader(got), b) {
			t.Fatalf("%q: the encoding is not stable", h)
		}
	})
}

// FuzzParseTime: ParseTime never panics, and accepts only what FormatTime
// writes: a parsed time formats back to the same text.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-12-01T09:05:07.123Z", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
		"2026-02-30T00:00:00.000Z", "2026-12-01T24:00:00.000Z", "2026-12-01T09:05:60.000Z", "+026-12-01T09:05:07.123Z",
		"-026-12-01T09:05:07.123Z", "2026-12-01T09:05:07.12Z", "2026-12-01T09:05:07,123Z", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		if err != nil {
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("ParseTime(%q) = %v: not UTC", s, got)
		}
		if back := FormatTime(got); back != s {
			t.Fatalf("ParseTime(%q) = %v, which formats as %q", s, got, back)
		}
	})
}
