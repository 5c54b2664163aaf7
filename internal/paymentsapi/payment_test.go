package paymentsapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodePayment(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		body string
		want paymentRequest
	}{
		{`{"amount": 4000, "currency": "usd"}`, paymentRequest{Amount: 4000, Currency: "USD"}},
		{`{"amount":1,"currency":"EuR","description":"café"}`, paymentRequest{Amount: 1, Currency: "EUR", Description: "café"}},
		{`{"amount": 9223372036854775807, "currency": "JPY", "description": null}`, paymentRequest{Amount: 1<<63 - 1, Currency: "JPY"}},
		{" \n{\"amount\": 5, \"currency\": \"GBP\"}\n", paymentRequest{Amount: 5, Currency: "GBP"}},
	} {
		got, err := decodePayment(strings.NewReader(tc.body))
		require.NoError(t, err, "body %s", tc.body)
		require.Equal(t, tc.want, got, "body %s", tc.body)
	}

	for _, tc := range []struct{ body, want string }{
		{``, "empty"},
		{`null`, "amount is required"},
		{`{}`, "amount is required"},
		{`{"amount": null, "currency": "USD"}`, "amount is required"},
		{`{"amount": 0, "currency": "USD"}`, "positive integer"},
		{`{"amount": -1, "currency": "USD"}`, "positive integer"},
		{`{"amount": 1.0, "currency": "USD"}`, "positive integer"},
		{`{"amount": 1E2, "currency": "USD"}`, "positive integer"},
		{`{"amount": "1", "currency": "USD"}`, "positive integer"},
		{`{"amount": true, "currency": "USD"}`, "positive integer"},
		{`{"amount": 9223372036854775808, "currency": "USD"}`, "at most"},
		{`{"amount": 1}`, "currency is required"},
		{`{"amount": 1, "currency": "usdx"}`, "three letters"},
		{`{"amount": 1, "currency": "é€"}`, "three letters"},
		{`{"amount": 1, "currency": 840}`, "wrong type"},
		{`{"amount": 1, "currency": "USD", "extra": 1}`, "unknown field"},
		{`{"amount": 1, "currency": "USD"}x`, "after the JSON object"},
		{`{"amount": 1, "currency": "USD"`, "not a JSON object"},
		{`{"amount": 1, "currency": "USD", "description": "` + strings.Repeat("é", maxDescriptionRunes+1) + `"}`, "at most 500 characters"},
		{`{"amount": 1, "currency": "USD", "description": "` + strings.Repeat("x", maxPaymentBodyBytes) + `"}`, "larger than"},
	} {
		_, err := decodePayment(strings.NewReader(tc.body))
		require.ErrorIs(t, err, errInvalidPayment, "body %.60s", tc.body)
		require.Contains(t, err.Error(), tc.want, "body %.60s", tc.body)
	}
}

func TestBearerAccount(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		header []string
		want   string
		ok     bool
	}{
		{[]string{"Bearer alice"}, "alice", true},
		{[]string{"bearer acct_42.eu-1"}, "acct_42.eu-1", true},
		{[]string{"Bearer   bob  "}, "bob", true},
		{nil, "", false},
		{[]string{"Bearer"}, "", false},
		{[]string{"Bearer "}, "", false},
		{[]string{"Basic YWxpY2U6eA=="}, "", false},
		{[]string{"Bearer a b"}, "", false},
		{[]string{"Bearer " + strings.Repeat("a", maxAccountBytes+1)}, "", false},
		{[]string{"Bearer alice", "Bearer bob"}, "", false},
	} {
		r, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		require.NoError(t, err)
		for _, h := range tc.header {
			r.Header.Add("Authorization", h)
		}
		got, err := bearerAccount(r)
		if !tc.ok {
			require.ErrorIs(t, err, errNoAccount, "header %q", tc.header)
			continue
		}
		require.NoError(t, err, "header %q", tc.header)
		require.Equal(t, tc.want, got)
	}
}
