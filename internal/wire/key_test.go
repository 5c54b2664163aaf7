package wire

import (
	"errors"
	"strings"
	"testing"

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
		{name: "QuotedComma", header: []string{`"a,b"`}, want: "a,b"},
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
				} else {
					require.NotErrorIs(t, err, ErrKeyInvalid)
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

func TestParseString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "Plain", in: `"abc"`, want: "abc"},
		{name: "Empty", in: `""`, want: ""},
		{name: "Escapes", in: `"a\"b\\c"`, want: `a"b\c`},
		{name: "Spaces", in: `" a "`, want: " a "},
		{name: "NoQuote", in: `abc`, wantErr: true},
		{name: "NothingAtAll", in: ``, wantErr: true},
		{name: "LeadingSpace", in: ` "abc"`, wantErr: true},
		{name: "TrailingSpace", in: `"abc" `, wantErr: true},
		{name: "Unterminated", in: `"abc`, wantErr: true},
		{name: "Param", in: `"a";p=1`, wantErr: true},
		{name: "BadEscape", in: `"\a"`, wantErr: true},
		{name: "EscapeAtEnd", in: `"\`, wantErr: true},
		{name: "NonASCII", in: "\"\xc3\xa9\"", wantErr: true},
		{name: "DEL", in: "\"\x7f\"", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseString(tt.in)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrKeyInvalid, "got %q", got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestQuoteString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		ok       bool
	}{
		{in: "abc", want: `"abc"`, ok: true},
		{in: "", want: `""`, ok: true},
		{in: `a"b\c`, want: `"a\"b\\c"`, ok: true},
		{in: " padded ", want: `" padded "`, ok: true},
		{in: "a,b", want: `"a,b"`, ok: true},
		{in: "ключ", ok: false},
		{in: "tab\tinside", ok: false},
		{in: "del\x7f", ok: false},
		{in: "\xff", ok: false},
	}
	for _, tt := range tests {
		got, ok := QuoteString(tt.in)
		require.Equal(t, tt.ok, ok, "QuoteString(%q) ok", tt.in)
		require.Equal(t, tt.want, got, "QuoteString(%q)", tt.in)
	}
}

// TestCheckKey_AndNeedsQuotes holds the client's rules (a bare profile
// accepts CheckKey && !NeedsQuotes; a quoted one CheckKey && QuoteString's
// ok), with the cases of the client's profile test.
func TestCheckKey_AndNeedsQuotes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key          string
		bare, quoted bool // accepted
	}{
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", true, true},
		{"plain", true, true},
		{" padded", false, true},
		{"padded\t", false, false},
		{`"starts-quoted`, false, true},
		{"a,b", false, true},
		{`mid"quote`, true, true},
		{"ключ", true, false},
		{"tab\tinside", false, false},
		{"", false, false},
		{strings.Repeat("k", 255), true, true},
		{strings.Repeat("k", 256), false, false},
		{"a\x7fb", false, false},
		{"a\u0085b", false, false},
		{"a\xffb", false, false},
	}
	for _, tt := range tests {
		valid := CheckKey(tt.key, MaxKeyBytes) == nil
		_, quotable := QuoteString(tt.key)
		require.Equal(t, tt.bare, valid && !NeedsQuotes(tt.key), "bare %q", tt.key)
		require.Equal(t, tt.quoted, valid && quotable, "quoted %q", tt.key)
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		key      string
		maxBytes int
		reason   string // a substring of the reason; "" if valid
	}{
		{name: "Valid", key: "abc", maxBytes: 10},
		{name: "AtMax", key: "abcde", maxBytes: 5},
		{name: "OverMax", key: "abcdef", maxBytes: 5, reason: "6 bytes long; at most 5"},
		{name: "MaxAboveLimitIsLimit", key: strings.Repeat("k", 256), maxBytes: 1000, reason: "at most 255"},
		{name: "ZeroMaxIsLimit", key: strings.Repeat("k", 255), maxBytes: 0},
		{name: "Empty", key: "", maxBytes: 10, reason: "empty"},
		{name: "InvalidUTF8", key: "\xff", maxBytes: 10, reason: "UTF-8"},
		{name: "Control", key: "a\x00", maxBytes: 10, reason: "(U+0000) at byte 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := CheckKey(tt.key, tt.maxBytes)
			if tt.reason == "" {
				require.NoError(t, err)
				return
			}
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			require.ErrorIs(t, err, ErrKeyInvalid)
			require.Contains(t, ke.Reason, tt.reason)
		})
	}
}

func TestNeedsQuotes(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]bool{
		"abc": false, `a"b`: false, "a b": false, "ключ": false,
		"": true, " a": true, "a ": true, "\ta": true, "a\t": true, `"a`: true, "a,b": true, ",": true,
	} {
		require.Equal(t, want, NeedsQuotes(k), "NeedsQuotes(%q)", k)
	}
}
