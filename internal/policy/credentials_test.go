package policy

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeaderMatches: names match in any case, "*-Suffix" patterns match
// longer names ending so, never the bare suffix.
func TestHeaderMatches(t *testing.T) {
	t.Parallel()
	credentials := map[string]bool{
		"Authorization": true, "Cookie": true, "X-Stripe-Token": true, "X-Client-Secret": true, "X-Session": true,
		"Session": false, "-Session": false, // "*-Session" needs something before "-Session"
		"Content-Type": false, "Tokens": false,
	}
	for name, want := range credentials {
		require.Equal(t, want, HeaderMatches(CredentialHeadersDefault, http.CanonicalHeaderKey(name)), name)
	}
	require.True(t, HeaderMatches([]string{"x-request-id"}, "X-Request-Id"), "names match in any case")
	require.False(t, HeaderMatches(nil, "Authorization"))
}

func TestValidHeaderPattern(t *testing.T) {
	t.Parallel()
	for n, want := range map[string]bool{
		"Authorization": true, "*-Token": true, "*Token": false, "*": false,
		"Bad Header": false, "": false,
	} {
		require.Equal(t, want, ValidHeaderPattern(n), "%q", n)
	}
}

// TestQueryCredential: credential-looking parameters in any case are
// found, the first in sorted order; a query without one, or none, is fine.
func TestQueryCredential(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]string{
		"":                          "",
		"page=2&sort=asc":           "",
		"page=2&API_KEY=x":          "API_KEY",
		"token=a&client_secret=b":   "client_secret",
		"X-Amz-Signature=s&expires": "X-Amz-Signature",
	} {
		got, err := QueryCredential(q)
		require.NoError(t, err, q)
		require.Equal(t, want, got, q)
	}
	_, err := QueryCredential("a=%zz")
	require.Error(t, err, "an unparsable query is an error")
}

// TestStoredOutcomeHeader: the allowlist, the profile's replay marker and
// key header and Idempotent-Response-Omitted are kept, under canonical
// names and copied; Set-Cookie and credentials never are, even when
// allowlisted.
func TestStoredOutcomeHeader(t *testing.T) {
	t.Parallel()
	p := mustProfile(t, "stripe")
	h := http.Header{
		"Content-Type":                {"application/json"},
		"Idempotent-Replayed":         {"true"},
		"Idempotency-Key":             {"k1"},
		"Idempotent-Response-Omitted": {"body"},
		"Set-Cookie":                  {"s=1"},
		"X-Session":                   {"secret"},
		"X-Internal":                  {"no"},
	}
	h["x-request-id"] = []string{"r1"} // not canonical
	got := StoredOutcomeHeader(h, &p, CredentialHeadersDefault, append([]string{"Set-Cookie", "X-Session"}, OutcomeHeadersDefault...))
	require.Equal(t, http.Header{
		"Content-Type":                {"application/json"},
		"Idempotent-Replayed":         {"true"},
		"Idempotency-Key":             {"k1"},
		"Idempotent-Response-Omitted": {"body"},
		"X-Request-Id":                {"r1"},
	}, got)
	got["Content-Type"][0] = "changed"
	require.Equal(t, "application/json", h.Get("Content-Type"), "values are copied")
	require.Equal(t, http.Header{}, StoredOutcomeHeader(nil, &p, nil, nil))
}
