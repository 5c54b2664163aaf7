package sqlstore

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEncodeHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		h    http.Header
		want string
	}{
		{"nil", nil, `{}`},
		{"empty", http.Header{}, `{}`},
		{"sorted names, values in order", http.Header{"Vary": {"B", "A"}, "Content-Type": {"text/html; charset=utf-8"}},
			`{"Content-Type":["text/html; charset=utf-8"],"Vary":["B","A"]}`},
		{"no HTML escaping", http.Header{"Link": {"<https://x/?a=1&b=2>; rel=\"next\""}},
			`{"Link":["<https://x/?a=1&b=2>; rel=\"next\""]}`},
		{"binary value", http.Header{"X-Bin": {"\xff\x00"}}, `{"X-Bin":[{"b64":"/wA="}]}`},
		{"no values", http.Header{"X-Empty": {}}, `{"X-Empty":[]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := EncodeHeader(tt.h)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

func TestEncodeHeader_BadName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"X-\xff", "X-\x00"} {
		_, err := EncodeHeader(http.Header{name: {"v"}})
		require.ErrorIs(t, err, errHeaderName, "name %q", name)
	}
}

func TestDecodeHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    http.Header
		wantErr bool
	}{
		{``, http.Header{}, false},
		{`null`, http.Header{}, false},
		{`{}`, http.Header{}, false},
		// jsonb reorders keys and adds spaces; both must decode.
		{`{"Vary": ["B", "A"], "X-Bin": [{"b64": "/wA="}]}`, http.Header{"Vary": {"B", "A"}, "X-Bin": {"\xff\x00"}}, false},
		{`[]`, nil, true},
		{`{"A":"b"}`, nil, true},
		{`{"A":[1]}`, nil, true},
		{`{"A":[{"b64":"!!"}]}`, nil, true},
		{`{"A":[{"b64":1}]}`, nil, true},
		{`{`, nil, true},
	} {
		got, err := DecodeHeader([]byte(tt.in))
		if tt.wantErr {
			require.Error(t, err, "decode %q", tt.in)
			continue
		}
		require.NoError(t, err, "decode %q", tt.in)
		require.Equal(t, tt.want, got, "decode %q", tt.in)
	}
}

// FuzzResponseEncoding checks that every storable header survives the
// stored JSON form byte for byte, and that decoding arbitrary stored bytes
// never panics.
func FuzzResponseEncoding(f *testing.F) {
	f.Add("Content-Type", "application/json", "", []byte(`{"Content-Type":["application/json"]}`))
	f.Add("Vary", "Accept", "Accept-Encoding", []byte(`{"Vary":["Accept","Accept-Encoding"]}`))
	f.Add("X-Bin", "\xff\xfe", "\x00", []byte(`{"X-Bin":[{"b64":"//4="},{"b64":"AA=="}]}`))
	f.Add("Location", "/a?b=1&c=<2>", "\u2028", []byte(`{"A":[{"b64":"%%%"}]}`))
	f.Add("X-\xff", "v", "w", []byte(`not json`))
	f.Add("", "", "", []byte(`null`))
	f.Fuzz(func(t *testing.T, name, v1, v2 string, stored []byte) {
		h := http.Header{name: {v1, v2}, "Content-Type": {v2}}
		enc, err := EncodeHeader(h)
		if err != nil {
			require.ErrorIs(t, err, errHeaderName)
			require.False(t, textSafe(name))
		} else {
			got, err := DecodeHeader(enc)
			require.NoError(t, err, "decode %q", enc)
			require.Equal(t, h, got)
		}

		// The plain fast path agrees with encoding/json on what it accepts.
		if plain, ok := decodeHeaderPlain(stored); ok {
			slow, err := decodeHeaderJSON(stored)
			require.NoError(t, err, "the fast path accepted %q", stored)
			require.Equal(t, slow, plain, "decode %q", stored)
		}
		if enc != nil {
			plain, ok := decodeHeaderPlain(enc)
			if ok {
				require.Equal(t, h, plain)
			}
		}

		// Arbitrary stored bytes: an error or a header that encodes again
		// to a fixed point.
		dec, err := DecodeHeader(stored)
		if err != nil {
			return
		}
		enc, err = EncodeHeader(dec)
		if err != nil {
			require.ErrorIs(t, err, errHeaderName)
			return
		}
		again, err := DecodeHeader(enc)
		require.NoError(t, err)
		require.Equal(t, dec, again)
	})
}

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	type cfg struct {
		N int
		S string
		D []string
	}
	defaults := cfg{N: 3, S: "s", D: []string{"d"}}
	require.Equal(t, &defaults, ConfigWithDefaults(nil, defaults), "nil is all defaults")
	in := &cfg{N: 7}
	require.Equal(t, &cfg{N: 7, S: "s", D: []string{"d"}}, ConfigWithDefaults(in, defaults), "set fields are kept")
	require.Equal(t, &cfg{N: 7}, in, "the receiver is not modified")
}

func TestCheckNotNegative(t *testing.T) {
	t.Parallel()
	type cfg struct {
		N int
		D time.Duration
		S string
	}
	require.NoError(t, CheckNotNegative("p: Config", &cfg{}))
	err := CheckNotNegative("p: Config", &cfg{N: -1, D: -time.Second})
	require.ErrorContains(t, err, "p: Config.N must not be negative, got -1")
	require.ErrorContains(t, err, "p: Config.D must not be negative, got -1s", "every field is named")
}

// The stored headers of a replay, as PostgreSQL's jsonb returns them
// (spaces after the separators, its own key order), decode without
// encoding/json, in under half its allocations.
func TestDecodeHeader_PlainFormWithoutEncodingJSON(t *testing.T) { //nolint:paralleltest // measures the heap
	stored := []byte(`{"Vary": ["Accept", "Accept-Encoding"], "Content-Type": ["application/json"], "Idempotency-Original-Request-Id": ["4bf92f3577b34da6a3ce929d0e0e4736"]}`)
	want := http.Header{
		"Vary":                            {"Accept", "Accept-Encoding"},
		"Content-Type":                    {"application/json"},
		"Idempotency-Original-Request-Id": {"4bf92f3577b34da6a3ce929d0e0e4736"},
	}
	got, ok := decodeHeaderPlain(stored)
	require.True(t, ok)
	require.Equal(t, want, got)
	slow, err := decodeHeaderJSON(stored)
	require.NoError(t, err)
	require.Equal(t, slow, got)

	plain := testing.AllocsPerRun(100, func() { _, _ = DecodeHeader(stored) })
	viaJSON := testing.AllocsPerRun(100, func() { _, _ = decodeHeaderJSON(stored) })
	require.Less(t, plain, viaJSON/2, "plain %v allocations, encoding/json %v", plain, viaJSON)

	for _, other := range []string{`{"A":["\u00e9"]}`, `{"A":[{"b64":"AA=="}]}`, "{\"A\":[\"\xff\"]}", `{"A":["x"]} x`, `null`, ``} {
		_, ok := decodeHeaderPlain([]byte(other))
		require.False(t, ok, "%q is left to encoding/json", other)
	}
}
