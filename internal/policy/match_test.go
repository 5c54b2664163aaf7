package policy

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCodeRule_BodyCodes: where a body's error codes are read, under the
// profiles' rule and under one extended with more fields and lists.
func TestCodeRule_BodyCodes(t *testing.T) {
	t.Parallel()
	jsonH := http.Header{"Content-Type": {"application/json"}}
	extended := ProfileCodes()
	extended.Fields = append(extended.Fields, "issue")
	extended.Lists = []string{"details"}
	for _, tc := range []struct {
		name      string
		h         http.Header
		body      string
		profile   []string
		extension []string
	}{
		{"problem type", http.Header{"Content-Type": {"application/problem+json"}}, `{"type": "https://x/in-flight", "status": 409}`,
			[]string{"https://x/in-flight"}, []string{"https://x/in-flight"}},
		{"error object", jsonH, `{"error": {"type": "idempotency_error", "code": 42}}`,
			[]string{"idempotency_error", "42"}, []string{"idempotency_error", "42"}},
		{"error_codes", jsonH, `{"error_codes": ["a", "b"]}`, []string{"a", "b"}, []string{"a", "b"}},
		{"no content type, looks like JSON", nil, ` {"errorCode": "704"}`, []string{"704"}, []string{"704"}},
		{"not JSON", http.Header{"Content-Type": {"text/plain"}}, `code: x`, []string{}, []string{}},
		{"broken JSON", jsonH, `{"code": `, []string{}, []string{}},
		{"details and issue", jsonH, `{"name": "DUPLICATE", "details": [{"issue": "DUPLICATE_REQUEST_ID"}, {"code": "c"}]}`,
			[]string{"DUPLICATE"}, []string{"DUPLICATE", "DUPLICATE_REQUEST_ID", "c"}},
	} {
		require.Equal(t, tc.profile, profileCodes.BodyCodes(tc.h, []byte(tc.body)), tc.name)
		require.Equal(t, tc.extension, extended.BodyCodes(tc.h, []byte(tc.body)), tc.name)
	}
	require.Equal(t, profileCodes, ProfileCodes(), "extending a copy leaves the profiles' rule alone")
}

// TestMatcher: status first, then the code among the body's; the first
// matching answer wins; the body is read only when a code is needed.
func TestMatcher(t *testing.T) {
	t.Parallel()
	h := http.Header{"Content-Type": {"application/json"}}
	body := []byte(`{"error": {"code": "idempotency_key_in_use"}}`)
	inUse := Answer{Status: 409, Code: "idempotency_key_in_use"}
	any429 := Answer{Status: 429}

	m := Matcher{Status: 409, Header: h, Body: body, Rule: profileCodes}
	a, ok := m.Match([]Answer{{Status: 409, Code: "other"}, inUse, {Status: 409}})
	require.True(t, ok)
	require.Equal(t, inUse, a)
	_, ok = m.Match([]Answer{{Status: 409, Code: "other"}, any429})
	require.False(t, ok)

	m = Matcher{Status: 429, Header: h, Body: []byte(`{`), Rule: profileCodes}
	a, ok = m.Match([]Answer{inUse, any429})
	require.True(t, ok)
	require.Equal(t, any429, a)
	require.Nil(t, m.codes, "no code needed: the body is not read")
}
