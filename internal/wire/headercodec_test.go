package wire

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeaderCodec_RoundTripsBytes: stored headers come back byte for byte,
// including values that are not UTF-8; rows written as JSON before the
// binary codec still decode.
func TestHeaderCodec_RoundTripsBytes(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]http.Header{
		"empty":        {},
		"latin-1":      {"X-Name": {"Jos\xe9 M\xfcller"}},
		"invalid utf8": {"X-Raw": {"\xff\xfe\x80", "second"}, "Content-Type": {"application/json"}},
		"tab and 8bit": {"X-A": {"a\tb", "", "\u00e9\x85"}},
	} {
		b := EncodeHeader(h)
		got, err := DecodeHeader(b)
		require.NoError(t, err, name)
		require.Equal(t, h, got, name)
		require.Equal(t, b, EncodeHeader(got), name)
	}
	legacy, err := DecodeHeader([]byte(`{"Content-Type":["application/json"],"x-lower":["v"]}`))
	require.NoError(t, err)
	require.Equal(t, http.Header{"Content-Type": {"application/json"}, "X-Lower": {"v"}}, legacy)
}

// TestEncodeHeader_Format pins format version 1 byte for byte: rows already
// written must keep decoding, and both halves must write the same bytes.
func TestEncodeHeader_Format(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    http.Header
		want []byte
	}{
		{name: "Nil", h: nil, want: []byte{0, 1, 0}},
		{name: "Empty", h: http.Header{}, want: []byte{0, 1, 0}},
		{name: "OneValue", h: http.Header{"A": {"b"}}, want: []byte{0, 1, 1, 1, 'A', 1, 1, 'b'}},
		{name: "SortedNames", h: http.Header{"B": {""}, "A": {"x", "\xff"}},
			want: []byte{0, 1, 2, 1, 'A', 2, 1, 'x', 1, 0xff, 1, 'B', 1, 0}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, EncodeHeader(tt.h), tt.name)
	}
}

func TestDecodeHeader_Refuses(t *testing.T) {
	t.Parallel()
	tests := map[string][]byte{
		"only the marker":        {0},
		"unknown version":        {0, 9},
		"truncated count":        {0, 1},
		"name longer than input": {0, 1, 5},
		"truncated values":       {0, 1, 1, 3, 'a', 'b'},
		"LF in value":            {0, 1, 1, 1, 'a', 1, 1, '\n'},
		"NUL in value":           {0, 1, 1, 1, 'a', 1, 1, 0},
		"name not a token":       {0, 1, 1, 3, 'a', ' ', 'b', 0},
		"empty name":             {0, 1, 1, 0, 0},
		"trailing byte":          append(EncodeHeader(http.Header{"A": {"b"}}), 0),
		"too many names":         {0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"json not an object":     []byte(`[1]`),
		"json bad name":          []byte(`{"a b":["c"]}`),
		"json CR in value":       []byte(`{"A":["b\rc"]}`),
		"json broken":            []byte(`{`),
	}
	for name, b := range tests {
		h, err := DecodeHeader(b)
		require.ErrorIs(t, err, ErrHeaderCodec, "%s: %q decoded as %v", name, b, h)
		require.Nil(t, h, name)
	}
}

func TestDecodeHeader_EmptyIsEmptyHeader(t *testing.T) {
	t.Parallel()
	h, err := DecodeHeader(nil)
	require.NoError(t, err)
	require.NotNil(t, h)
	require.Empty(t, h)
	require.True(t, bytes.Equal([]byte{0, 1, 0}, EncodeHeader(h)))
}
