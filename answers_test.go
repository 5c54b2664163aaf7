package idemkit

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestReplay_IsFinalWhateverItsStatus: a server that stores errors (as the
// IETF draft allows) replays them; a replay can only ever be the same
// answer, so it ends the intent at once (failed, Replayed), whatever its
// status, instead of being retried until the horizon.
func TestReplay_IsFinalWhateverItsStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		extra  []string
		want   IntentState
	}{
		{http.StatusInternalServerError, nil, StateFailed},
		{http.StatusServiceUnavailable, []string{"Retry-After", "1"}, StateFailed},
		{http.StatusConflict, []string{"Retry-After", "1"}, StateFailed},
		{http.StatusTooManyRequests, []string{"Retry-After", "0"}, StateFailed},
		{http.StatusRequestTimeout, nil, StateFailed},
		{http.StatusCreated, nil, StateSucceeded},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, "Idempotency-Key", answer(tc.status, `{"stored":true}`, append([]string{"Idempotent-Replayed", "true"}, tc.extra...)...))
			b := setup(t, nil, nil)
			in, err := b.c.Do(shortCtx(t, 10*time.Second), &Request{URL: s.srv.URL})
			require.NotNil(t, in)
			require.Equal(t, tc.want, in.State, "err %v", err)
			require.Equal(t, 1, in.Attempts, "a replay is never retried")
			require.True(t, in.Outcome.Replayed)
			require.Equal(t, tc.status, in.Outcome.Status)
			if tc.want == StateFailed {
				require.ErrorIs(t, err, StateFailed)
				require.NotErrorIs(t, err, ErrKeyReused)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// TestReplay_OtherSpellingsAreReplays: the replay markers of other
// middlewares mark a replay under the default profile too.
func TestReplay_OtherSpellingsAreReplays(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Idempotent-Replayed", "Idempotency-Replayed", "Idempotent-Replay", "Idempotency-Replay"} {
		for _, value := range []string{"true", "TRUE", "?1"} {
			s := newScripted(t, "Idempotency-Key", answer(http.StatusOK, "{}", name, value))
			b := setup(t, nil, nil)
			in, err := b.c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL})
			require.NoError(t, err)
			require.True(t, in.Outcome.Replayed, "%s: %s", name, value)
		}
	}
}

// TestConflict_BusinessAnswerIsFailed: a 409 or 429 that says nothing about
// the key (no in-flight problem type, no Retry-After) is the handler's own
// answer: failed after one attempt, not retried until "outcome unknown".
func TestConflict_BusinessAnswerIsFailed(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusConflict, http.StatusTooManyRequests} {
		s := newScripted(t, "Idempotency-Key", answer(status, `{"error":"invoice already paid"}`, "Content-Type", "application/json"))
		b := setup(t, nil, nil)
		in, err := b.c.Do(shortCtx(t, 10*time.Second), &Request{URL: s.srv.URL})
		require.ErrorIs(t, err, StateFailed, "status %d", status)
		require.Equal(t, StateFailed, in.State)
		require.Equal(t, 1, in.Attempts)
		require.Equal(t, status, in.Outcome.Status)
		require.JSONEq(t, `{"error":"invoice already paid"}`, string(in.Outcome.Body))
	}
}

// TestConflict_InFlightIsRetried: the idemkit server's in-flight problem,
// or any 409/429 with a Retry-After, means "come back later".
func TestConflict_InFlightIsRetried(t *testing.T) {
	t.Parallel()
	for name, first := range map[string]func(http.ResponseWriter){
		"in-flight problem": answer(http.StatusConflict, `{"type":"`+policy.ProblemTypeInFlight+`","status":409}`, "Content-Type", "application/problem+json"),
		"409 Retry-After":   answer(http.StatusConflict, `{}`, "Retry-After", "0"),
		"429 Retry-After":   answer(http.StatusTooManyRequests, `{}`, "Retry-After", "0"),
	} {
		s := newScripted(t, "Idempotency-Key", first, answer(http.StatusCreated, `{"id":"ch_1"}`))
		b := setup(t, nil, nil)
		in, err := b.c.Do(testkit.Ctx(t), &Request{URL: s.srv.URL})
		require.NoError(t, err, name)
		require.Equal(t, 2, in.Attempts, name)
		keys := s.sentKeys()
		require.Equal(t, keys[0], keys[1], "%s: the same key", name)
	}
}
