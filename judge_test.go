package idemkit

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	policy := decision{verdict: verdictPolicy}
	gaveUp := errors.New("gave up")
	for _, tc := range []struct {
		name string
		f    attemptFacts
		want judgment
	}{
		{"2xx is success", attemptFacts{status: 201, dec: policy}, judgment{state: StateSucceeded}},
		{"2xx after a lost answer is success", attemptFacts{status: 201, dec: policy, unanswered: 1}, judgment{state: StateSucceeded}},
		{"4xx on a first attempt is failed", attemptFacts{status: 401, dec: policy}, judgment{state: StateFailed}},
		{"401 after a lost answer is unknown", attemptFacts{status: 401, dec: policy, unanswered: 1}, judgment{state: StateUnknown}},
		{"403 after a lost answer is unknown", attemptFacts{status: 403, dec: policy, unanswered: 2}, judgment{state: StateUnknown}},
		{"400 after a lost answer is unknown", attemptFacts{status: 400, dec: policy, unanswered: 1}, judgment{state: StateUnknown}},
		{"a proxy's 502 page given up after a lost answer is unknown", attemptFacts{status: 502, dec: policy, policyErr: gaveUp, unanswered: 1}, judgment{state: StateUnknown}},
		{"bare 409 on a first attempt may be a business answer", attemptFacts{status: 409, dec: policy}, judgment{state: StateFailed}},
		{"bare 409 after a lost answer is in flight", attemptFacts{status: 409, dec: policy, unanswered: 1}, judgment{retry: true, inFlight: true}},
		{"409 the profile says is in flight", attemptFacts{status: 409, dec: decision{verdict: verdictRetry}}, judgment{retry: true}},
		{"replayed 4xx is final", attemptFacts{status: 402, dec: decision{verdict: verdictFinal, replayed: true}, unanswered: 1}, judgment{state: StateFailed}},
		{"replayed 2xx is success", attemptFacts{status: 201, dec: decision{verdict: verdictFinal, replayed: true}, unanswered: 1}, judgment{state: StateSucceeded}},
		{"key reused is definitive even after a loss", attemptFacts{status: 422, dec: decision{verdict: verdictKeyReused}, unanswered: 1}, judgment{state: StateFailed}},
		{"policy retry", attemptFacts{status: 503, dec: policy, policyRetry: true, unanswered: 1}, judgment{retry: true}},
		{"transport error retried", attemptFacts{dec: policy, policyRetry: true}, judgment{retry: true}},
		{"transport error given up", attemptFacts{dec: policy, policyErr: gaveUp}, judgment{state: StateFailed}},
		{"transport error given up after a loss", attemptFacts{dec: policy, policyErr: gaveUp, unanswered: 1}, judgment{state: StateUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, judge(tc.f), "got X want Y")
		})
	}
}

func TestNeverSent(t *testing.T) {
	t.Parallel()
	dial := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}
	require.True(t, neverSent(dial))
	require.True(t, neverSent(fmt.Errorf("w: %w", &net.DNSError{Err: "no such host", Name: "x"})))
	read := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}}
	require.False(t, neverSent(read))
	require.False(t, neverSent(errors.New("EOF")))
}
