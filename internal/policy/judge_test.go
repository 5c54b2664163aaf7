package policy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJudge: what one attempt's result means given what came before (the
// step of Decide after the profile's reading and the retry policy's).
func TestJudge(t *testing.T) {
	t.Parallel()
	policy := Reading{Verdict: VerdictPolicy}
	gaveUp := errors.New("gave up")
	type facts struct {
		status      int
		r           Reading
		policyRetry bool
		policyErr   error
		unanswered  int
	}
	type judgment struct {
		kind     Kind
		inFlight bool
	}
	for _, tc := range []struct {
		name string
		f    facts
		want judgment
	}{
		{"2xx is success", facts{status: 201, r: policy}, judgment{kind: Succeeded}},
		{"2xx after a lost answer is success", facts{status: 201, r: policy, unanswered: 1}, judgment{kind: Succeeded}},
		{"4xx on a first attempt is failed", facts{status: 401, r: policy}, judgment{kind: Failed}},
		{"401 after a lost answer is unknown", facts{status: 401, r: policy, unanswered: 1}, judgment{kind: Unknown}},
		{"403 after a lost answer is unknown", facts{status: 403, r: policy, unanswered: 2}, judgment{kind: Unknown}},
		{"400 after a lost answer is unknown", facts{status: 400, r: policy, unanswered: 1}, judgment{kind: Unknown}},
		{"a proxy's 502 page given up after a lost answer is unknown", facts{status: 502, r: policy, policyErr: gaveUp, unanswered: 1}, judgment{kind: Unknown}},
		{"bare 409 on a first attempt may be a business answer", facts{status: 409, r: policy}, judgment{kind: Failed}},
		{"bare 409 after a lost answer is in flight", facts{status: 409, r: policy, unanswered: 1}, judgment{kind: Retry, inFlight: true}},
		{"409 the profile says is in flight", facts{status: 409, r: Reading{Verdict: VerdictRetry}}, judgment{kind: Retry}},
		{"replayed 4xx is final", facts{status: 402, r: Reading{Verdict: VerdictFinal, Replayed: true}, unanswered: 1}, judgment{kind: Failed}},
		{"replayed 2xx is success", facts{status: 201, r: Reading{Verdict: VerdictFinal, Replayed: true}, unanswered: 1}, judgment{kind: Succeeded}},
		{"key reused is definitive even after a loss", facts{status: 422, r: Reading{Verdict: VerdictKeyReused}, unanswered: 1}, judgment{kind: KeyReused}},
		{"policy retry", facts{status: 503, r: policy, policyRetry: true, unanswered: 1}, judgment{kind: Retry}},
		{"transport error retried", facts{r: policy, policyRetry: true}, judgment{kind: Retry}},
		{"transport error given up", facts{r: policy, policyErr: gaveUp}, judgment{kind: Failed}},
		{"transport error given up after a loss", facts{r: policy, policyErr: gaveUp, unanswered: 1}, judgment{kind: Unknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, inFlight := judge(tc.f.status, tc.f.r, tc.f.policyRetry, tc.f.policyErr, tc.f.unanswered)
			require.Equal(t, tc.want, judgment{k, inFlight}, "got X want Y")
		})
	}
}

func TestNeverSent(t *testing.T) {
	t.Parallel()
	dial := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}
	require.True(t, NeverSent(dial))
	require.True(t, NeverSent(fmt.Errorf("w: %w", &net.DNSError{Err: "no such host", Name: "x"})))
	read := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}}
	require.False(t, NeverSent(read))
	require.False(t, NeverSent(errors.New("EOF")))
}
