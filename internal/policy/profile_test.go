package policy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustProfile(t *testing.T, name string) Profile {
	t.Helper()
	p, ok := Known(name)
	require.True(t, ok, name)
	return p
}

// TestProfile_KeyEncodingRefusesWhatItCannotCarry: a caller key that the
// host's encoding would change is refused, never quoted silently.
func TestProfile_KeyEncodingRefusesWhatItCannotCarry(t *testing.T) {
	t.Parallel()
	bare := mustProfile(t, "idemkit")
	quoted := bare
	for _, tc := range []struct {
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
		{strings.Repeat("k", 256), false, false},
	} {
		require.Equal(t, tc.bare, CheckKey(&bare, tc.key, false) == nil, "bare %q", tc.key)
		require.Equal(t, tc.quoted, CheckKey(&quoted, tc.key, true) == nil, "quoted %q", tc.key)
	}
	require.Equal(t, `"a\"b\\c"`, KeyValue(`a"b\c`, true))
	require.Equal(t, `a"b\c`, KeyValue(`a"b\c`, false))
}

// TestClassify is the decision table of classify.
func TestClassify(t *testing.T) {
	t.Parallel()
	ours, stripe := mustProfile(t, "idemkit"), mustProfile(t, "stripe")
	problem := func(uri string) []byte { return []byte(`{"type":"` + uri + `","status":0}`) }
	pj := http.Header{"Content-Type": {"application/problem+json"}}
	replay := http.Header{"Idempotent-Replayed": {"true"}}
	for _, tc := range []struct {
		name   string
		p      *Profile
		status int
		h      http.Header
		body   []byte
		want   Verdict
	}{
		{"replayed 500", &ours, 500, replay, nil, VerdictFinal},
		{"replayed in-flight problem", &ours, 409, replay, problem(ProblemTypeInFlight), VerdictFinal},
		{"in-flight problem", &ours, 409, pj, problem(ProblemTypeInFlight), VerdictRetry},
		{"key-reused problem", &ours, 422, pj, problem(ProblemTypeKeyReused), VerdictKeyReused},
		{"handler's own 422", &ours, 422, pj, []byte(`{"type":"about:blank"}`), VerdictPolicy},
		{"business 409", &ours, 409, nil, []byte(`{"error":"already paid"}`), VerdictPolicy},
		{"stripe in use", &stripe, 409, nil, []byte(`{"error":{"code":"idempotency_key_in_use"}}`), VerdictRetry},
		{"stripe idempotency_error", &stripe, 400, nil, []byte(`{"error":{"type":"idempotency_error"}}`), VerdictKeyReused},
		{"stripe card error", &stripe, 402, nil, []byte(`{"error":{"type":"card_error"}}`), VerdictPolicy},
		{"not JSON", &stripe, 400, http.Header{"Content-Type": {"text/html"}}, []byte(`<h1>idempotency_error</h1>`), VerdictPolicy},
		{"broken JSON", &stripe, 400, nil, []byte(`{"error":`), VerdictPolicy},
	} {
		got := Classify(tc.p, tc.status, tc.h, tc.body)
		require.Equal(t, tc.want, got.Verdict, tc.name)
	}
}
