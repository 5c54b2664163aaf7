package server

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestParseKey(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("k", MaxKeyBytes)
	tests := []struct {
		name    string
		header  []string
		want    string
		wantErr error
	}{
		{name: "Bare", header: []string{"abc"}, want: "abc"},
		{name: "Quoted", header: []string{`"abc"`}, want: "abc"},
		{name: "UUID", header: []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, want: "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{name: "QuotedEscapes", header: []string{`"a\"b\\c"`}, want: `a"b\c`},
		{name: "SurroundingSpace", header: []string{"  abc\t"}, want: "abc"},
		{name: "QuotedWithSpaceInside", header: []string{`" a b "`}, want: " a b "},
		{name: "BareUTF8", header: []string{"clé-ключ"}, want: "clé-ключ"},
		{name: "MaxLength", header: []string{long}, want: long},
		{name: "MaxLengthQuoted", header: []string{`"` + long + `"`}, want: long},
		{name: "BareWithInnerQuote", header: []string{`ab"c`}, want: `ab"c`},

		{name: "Missing", header: nil, wantErr: ErrKeyMissing},
		{name: "Repeated", header: []string{"a", "a"}, wantErr: ErrKeyInvalid},
		{name: "Empty", header: []string{""}, wantErr: ErrKeyInvalid},
		{name: "OnlySpace", header: []string{"   "}, wantErr: ErrKeyInvalid},
		{name: "EmptyQuoted", header: []string{`""`}, wantErr: ErrKeyInvalid},
		{name: "TooLong", header: []string{long + "k"}, wantErr: ErrKeyInvalid},
		{name: "TooLongQuoted", header: []string{`"` + long + `k"`}, wantErr: ErrKeyInvalid},
		{name: "ControlChar", header: []string{"a\x01b"}, wantErr: ErrKeyInvalid},
		{name: "DEL", header: []string{"a\x7fb"}, wantErr: ErrKeyInvalid},
		{name: "C1Control", header: []string{"a\u0085b"}, wantErr: ErrKeyInvalid},
		{name: "InvalidUTF8", header: []string{"a\xffb"}, wantErr: ErrKeyInvalid},
		{name: "UnterminatedQuote", header: []string{`"abc`}, wantErr: ErrKeyInvalid},
		{name: "QuotedWithParams", header: []string{`"abc";x=1`}, wantErr: ErrKeyInvalid},
		{name: "QuotedList", header: []string{`"a", "b"`}, wantErr: ErrKeyInvalid},
		{name: "BareList", header: []string{"a, b"}, wantErr: ErrKeyInvalid},
		{name: "BadEscape", header: []string{`"a\nb"`}, wantErr: ErrKeyInvalid},
		{name: "EscapeAtEnd", header: []string{`"a\`}, wantErr: ErrKeyInvalid},
		{name: "QuotedNonASCII", header: []string{`"clé"`}, wantErr: ErrKeyInvalid},
		{name: "QuotedTab", header: []string{"\"a\tb\""}, wantErr: ErrKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseKey(tt.header)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "got key %q", got)
				if errors.Is(tt.wantErr, ErrKeyInvalid) {
					var ke *KeyError
					require.ErrorAs(t, err, &ke)
					require.NotEmpty(t, ke.Reason)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseKey_QuotedEqualsBare(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"abc", "retry-1", "8e03978e-40d5-43e8-bc93-6894a57f9324", "a b"} {
		bare, err := ParseKey([]string{k})
		require.NoError(t, err)
		quoted, err := ParseKey([]string{`"` + k + `"`})
		require.NoError(t, err)
		require.Equal(t, bare, quoted, "got %q and %q for %q", bare, quoted, k)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, `"a\\b"`, "", `""`, " ", "a,b", `"a";p`, "\x00", "\x7f",
		"clé", `"clé"`, "\xff", `"\`, strings.Repeat("x", 256), `"` + strings.Repeat("x", 255) + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey([]string{v})
		if err != nil {
			if !errors.Is(err, ErrKeyInvalid) {
				t.Fatalf("ParseKey(%q): got error %v, want one matching ErrKeyInvalid", v, err)
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
		// Quoting a key that fits the sf-string alphabet gives the same key.
		if sfSafe(key) {
			q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
			got, err := ParseKey([]string{q})
			if err != nil || got != key {
				t.Fatalf("ParseKey(%q) = %q, %v; want %q (the quoted form of ParseKey(%q))", q, got, err, key, v)
			}
		}
		// Parsing is stable for bare keys without surrounding space.
		if key == strings.Trim(key, " \t") && key[0] != '"' && !strings.Contains(key, ",") {
			got, err := ParseKey([]string{key})
			if err != nil || got != key {
				t.Fatalf("ParseKey(%q) = %q, %v; want it unchanged", key, got, err)
			}
		}
	})
}

// sfSafe reports whether s has only bytes an sf-string can carry (printable
// ASCII; '"' and '\\' escaped).
func sfSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
