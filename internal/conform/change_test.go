package conform_test

import (
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
		{`{"amount": 123456789012345678901234567890}`, `{"amount": 123456789012345678901234567891}`},
		{`{"name": "a\"b", "ok": true}`, `{"name": "a\"b-changed", "ok": true}`},
		{`{"k": {"inner": "v"}, "x": null}`, `{"k": {"inner": "v-changed"}, "x": null}`},
		{`["a", "b"]`, `["a-changed", "b"]`},
		{`{}`, `{}-changed`},
		{`amount=4000`, `amount=4000-changed`},
		{``, `-changed`},
	} {
		got, how := conform.ChangeBody([]byte(tt.in))
		require.Equal(t, tt.want, string(got), "ChangeBody(%s) (%s)", tt.in, how)
		require.NotEmpty(t, how)
	}
}
