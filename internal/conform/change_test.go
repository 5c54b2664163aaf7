package conform_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/conform"
)

func TestChangeBody(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{`{"amount": 4000, "currency": "USD"}`, `{"amount": 4001, "currency": "USD"}`},
		{`{"currency": "USD", "items": [{"qty": 2}], "amount": 1}`, `{"currency": "USD", "items": [{"qty": 3}], "amount": 1}`},
		{`{"amount": -5}`, `{"amount": -4}`},
		{`{"amount": 12.5}`, `{"amount": 13.5}`},
		{`{"amount": 1e3}`, `{"amount": 1001}`},
		{`{"amount": 1e20}`, `{"amount": 100000000000000000001}`},
		{`{"amount": 1.5e-3}`, `{"amount": 1.0015}`},
		{`{"amount": 1e400000}`, `{"amount": 1e4000001}`},
		{`{"amount": 123456789012345678901234567890}`, `{"amount": 123456789012345678901234567891}`},
		{`{"name": "a\"b", "ok": true}`, `{"name": "a\"b-changed", "ok": true}`},
		{`{"k": {"inner": "v"}, "x": null}`, `{"k": {"inner": "v-changed"}, "x": null}`},
		{`["a", "b"]`, `["a-changed", "b"]`},
		{`{}`, `{}-changed`},
		{`amount=4000`, `amount=4001`},
		{`currency=usd&amount=4000&x=1`, `currency=usd&amount=4001&x=1`},
		{`currency=usd&description=a`, `currency=usd&description=a-changed`},
		{`amount=-5`, `amount=-5-changed`},
		{``, `-changed`},
	} {
		got, how := conform.ChangeBody([]byte(tt.in))
		require.Equal(t, tt.want, string(got), "ChangeBody(%s) (%s)", tt.in, how)
		require.NotEmpty(t, how)
	}
}

// ChangeBody always changes the body, and a JSON body with a number or a
// string value stays JSON.
func FuzzChangeBody(f *testing.F) {
	for _, s := range []string{`{"amount": 4000}`, `{"a": 1e20}`, `[1.5e-3]`, `{"s": "x\"y"}`, `{}`, `1e400`, `-0`, `0.1`, `"s"`, `[true, null]`, ``, `x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, how := conform.ChangeBody(in)
		require.NotEqual(t, string(in), string(out), how)
		if json.Valid(in) && how != `"-changed" appended` {
			require.True(t, json.Valid(out), "%s -> %s (%s)", in, out, how)
			var a, b any
			da, db := json.NewDecoder(bytes.NewReader(in)), json.NewDecoder(bytes.NewReader(out))
			da.UseNumber()
			db.UseNumber()
			require.NoError(t, da.Decode(&a))
			require.NoError(t, db.Decode(&b))
			require.NotEqual(t, a, b, "%s -> %s: the same document", in, out)
		}
	})
}
