package policy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The expectations of one cell of the README's table ("What the SDK does
// with each answer").
const (
	succeeded  = "succeeded"
	failed     = "failed"      // failed, and failed after a lost answer too
	failedLost = "failed/lost" // failed; after a lost answer: unknown
	keyReused  = "key-reused"
	retry      = "retry"
	retry30    = "retry ≥ 30 s"
	retryRA    = "retry if Retry-After, else failed"
	retryRA409 = "retry if Retry-After, else failed (after a lost answer: retry)"
	unknown    = "unknown" // unknown, with or without a lost answer before
	na         = ""        // the row cannot arise under this profile (no replay marker)
)

var profiles = []string{"idemkit", "ietf", "stripe", "stripe-v2", "adyen", "checkout", "paypal"}

// answerOf builds the answer of a row.
type answerOf struct {
	status int
	header http.Header
	body   string
	err    error // a transport error instead of an answer
}

func pj(typ string) answerOf {
	return answerOf{header: http.Header{"Content-Type": {"application/problem+json"}}, body: `{"type":"` + typ + `"}`}
}

// TestDecide_READMETable walks every row of the README's table of what
// the SDK does with each answer, under every shipped profile, through
// Decide, without a database. (stripe-v2 answers as stripe.)
func TestDecide_READMETable(t *testing.T) {
	t.Parallel()
	type row struct {
		name     string
		answers  []answerOf
		replayed bool
		// want per profile, in the order of profiles.
		want [7]string
	}
	status := func(s ...int) []answerOf {
		out := []answerOf{}
		for _, st := range s {
			out = append(out, answerOf{status: st})
		}
		return out
	}
	with := func(a answerOf, st int) answerOf { a.status = st; return a }
	stripeErr := func(field, code string) answerOf {
		return answerOf{header: http.Header{"Content-Type": {"application/json"}}, body: `{"error":{"` + field + `":"` + code + `"}}`}
	}
	rows := []row{
		{"2xx", status(200, 201, 202, 204), false,
			[7]string{succeeded, succeeded, succeeded, succeeded, succeeded, succeeded, succeeded}},
		{"2xx replayed", status(200, 201), true,
			[7]string{succeeded, succeeded, succeeded, succeeded, na, na, na}},
		{"anything else replayed", append(status(400, 402, 409, 422, 429, 500, 503), with(pj(ProblemTypeInFlight), 409)), true,
			[7]string{failed, failed, failed, failed, na, na, na}},
		{"422 key-reused problem", []answerOf{with(pj(ProblemTypeKeyReused), 422)}, false,
			[7]string{keyReused, keyReused, failedLost, failedLost, failedLost, failedLost, failedLost}},
		{"422 other, 417", append(status(422, 417), with(pj("about:blank"), 422)), false,
			[7]string{failedLost, keyReused, failedLost, failedLost, failedLost, failedLost, failedLost}},
		{"400 idempotency_error", []answerOf{with(stripeErr("type", "idempotency_error"), 400)}, false,
			[7]string{failedLost, failedLost, keyReused, keyReused, failedLost, failedLost, failedLost}},
		// Checkout.com retries every 409 (its in-flight answer), after at
		// least 30 s: the README's cell says so in the "409 other" row.
		{"409 in-flight problem", []answerOf{with(pj(ProblemTypeInFlight), 409)}, false,
			[7]string{retry, retry, retryRA409, retryRA409, retryRA409, retry30, retryRA409}},
		{"409 idempotency_key_in_use", []answerOf{with(stripeErr("code", "idempotency_key_in_use"), 409)}, false,
			[7]string{retryRA409, retry, retry, retry, retryRA409, retry30, retryRA409}},
		{"409 other", append(status(409), answerOf{status: 409, body: `{"error":"already paid"}`}), false,
			[7]string{retryRA409, retry, retryRA409, retryRA409, retryRA409, retry30, retryRA409}},
		{"429", status(429), false,
			[7]string{retryRA, retryRA, retry, retry, retryRA, retry30, retryRA}},
		{"408, 425, 5xx except 501", status(408, 425, 500, 502, 503, 504, 599), false,
			[7]string{retry, retry, retry, retry, retry, retry, retry}},
		{"network error, timeout", []answerOf{
			{err: &url.Error{Op: "Post", URL: "https://h/x", Err: errors.New("read: connection reset by peer")}},
			{err: &url.Error{Op: "Post", URL: "https://h/x", Err: context.DeadlineExceeded}},
		}, false,
			[7]string{retry, retry, retry, retry, retry, retry, retry}},
		{"403 replay-forbidden problem", []answerOf{with(pj(ProblemTypeWithheld), 403)}, false,
			[7]string{unknown, failedLost, failedLost, failedLost, failedLost, failedLost, failedLost}},
		{"501, 3xx, other 4xx", status(501, 301, 302, 304, 400, 401, 402, 403, 404, 405, 410, 413, 415), false,
			[7]string{failedLost, failedLost, failedLost, failedLost, failedLost, failedLost, failedLost}},
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, r := range rows {
		for i, name := range profiles {
			want := r.want[i]
			if want == na {
				continue
			}
			p := mustProfile(t, name)
			for _, a := range r.answers {
				label := r.name + " / " + name + " / " + describeAnswer(a)
				facts := func(retryAfter bool, unanswered int) Facts {
					f := Facts{Now: now, Attempt: unanswered + 1, Profile: &p, Unanswered: unanswered,
						Backoff: func(time.Duration, time.Duration, int, *http.Response) time.Duration { return time.Second },
						Horizon: NewHorizon(now, now.Add(-time.Minute), 24*time.Hour, 0, time.Minute, time.Time{})}
					if a.err != nil {
						f.Err = a.err
						return f
					}
					h := a.header.Clone()
					if h == nil {
						h = http.Header{}
					}
					if r.replayed {
						h.Set(p.ReplayHeaders[0], "true")
					}
					if retryAfter {
						h.Set("Retry-After", "5")
					}
					f.Resp = &http.Response{StatusCode: a.status, Header: h}
					f.Body = []byte(a.body)
					return f
				}
				d := Decide(context.Background(), facts(false, 0))
				switch want {
				case succeeded:
					require.Equal(t, Succeeded, d.Kind, label)
					require.True(t, d.Answered, label)
					require.Equal(t, r.replayed, d.Replayed, label)
					require.Equal(t, Succeeded, Decide(context.Background(), facts(false, 1)).Kind, "%s: after a lost answer", label)
				case failed:
					require.Equal(t, Failed, d.Kind, label)
					require.True(t, d.Answered, label)
					require.Equal(t, Failed, Decide(context.Background(), facts(false, 1)).Kind, "%s: final even after a lost answer", label)
				case failedLost:
					require.Equal(t, Failed, d.Kind, label)
					require.True(t, d.Answered, label)
					lost := Decide(context.Background(), facts(false, 1))
					require.Equal(t, Unknown, lost.Kind, "%s: after a lost answer", label)
					require.True(t, strings.HasPrefix(lost.Reason, "outcome unknown: attempt 1 got no answer"), "%s: %s", label, lost.Reason)
				case unknown:
					require.Equal(t, Unknown, d.Kind, label)
					require.Equal(t, "unknown", d.Kind.State(), label)
					require.True(t, d.Answered, label)
					require.Contains(t, d.Reason, "never retry under a new key", label)
					require.Equal(t, Unknown, Decide(context.Background(), facts(false, 1)).Kind, "%s: after a lost answer", label)
				case keyReused:
					require.Equal(t, KeyReused, d.Kind, label)
					require.Equal(t, "failed", d.Kind.State(), label)
					require.Equal(t, KeyReused, Decide(context.Background(), facts(false, 1)).Kind, "%s: definitive even after a lost answer", label)
				case retry, retry30:
					require.Equal(t, Retry, d.Kind, label)
					require.Equal(t, "pending", d.Kind.State(), label)
					require.False(t, d.ServerDirected, label)
					if want == retry30 {
						require.False(t, d.At.Before(now.Add(30*time.Second)), "%s: at %v", label, d.At)
					} else {
						require.Equal(t, now.Add(time.Second), d.At, "%s: the backoff", label)
					}
				case retryRA, retryRA409:
					require.Equal(t, Failed, d.Kind, "%s: without Retry-After", label)
					ra := Decide(context.Background(), facts(true, 0))
					require.Equal(t, Retry, ra.Kind, "%s: with Retry-After", label)
					require.True(t, ra.ServerDirected, label)
					require.Equal(t, now.Add(5*time.Second), ra.At, "%s: the server's wait", label)
					if want == retryRA409 {
						lost := Decide(context.Background(), facts(false, 1))
						require.Equal(t, Retry, lost.Kind, "%s: after a lost answer", label)
						require.True(t, lost.InFlight, label)
						require.Contains(t, lost.Reason, "taken as \"still in progress\"", label)
					}
				default:
					t.Fatalf("%s: unknown expectation %q", label, want)
				}
			}
		}
	}
}

func describeAnswer(a answerOf) string {
	if a.err != nil {
		return a.err.Error()
	}
	return http.StatusText(a.status) + " " + a.body
}

// decideFacts is a retryable 503 at now, its horizon an hour away.
func decideFacts(now time.Time) Facts {
	p, _ := Known("idemkit")
	return Facts{Now: now, Attempt: 1, Profile: &p,
		Backoff:    func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 2 * time.Second },
		Resp:       &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}},
		Horizon:    Horizon{Window: time.Hour, First: now, Safety: time.Minute, At: now.Add(time.Hour)},
		Budget:     Budget{Max: 3},
		Retries:    4,
		Unanswered: 0}
}

func TestDecide_Waits(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()

	t.Run("backoff, and the retry counter grows", func(t *testing.T) {
		d := Decide(ctx, decideFacts(now))
		require.Equal(t, Retry, d.Kind)
		require.Equal(t, now.Add(2*time.Second), d.At)
		require.Equal(t, 5, d.Retries)
		require.Equal(t, "status 503", d.Reason)
	})
	t.Run("Retry-After 0 is not a hot loop", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp.Header.Set("Retry-After", "0")
		d := Decide(ctx, f)
		require.True(t, d.ServerDirected)
		require.Equal(t, now.Add(MinServerWait+2*time.Second), d.At)
		require.Equal(t, "status 503 (Retry-After: 0)", d.Reason)
	})
	t.Run("the budget delays the retry", func(t *testing.T) {
		f := decideFacts(now)
		f.Budget.Oldest = now.Add(-50 * time.Minute)
		d := Decide(ctx, f)
		require.Equal(t, Retry, d.Kind)
		require.True(t, d.Budgeted)
		require.Equal(t, now.Add(10*time.Minute), d.At)
		require.Contains(t, d.Reason, "3 attempts in the last hour (Config.MaxAttemptsPerHour)")
	})
	t.Run("the budget past the horizon expires", func(t *testing.T) {
		f := decideFacts(now)
		f.Budget.Oldest = now.Add(-time.Minute) // allowed again in 59 min
		f.Horizon.At = now.Add(30 * time.Minute)
		d := Decide(ctx, f)
		require.Equal(t, Expired, d.Kind)
		require.Equal(t, "expired", d.Kind.State())
		require.False(t, d.Answered)
		require.Contains(t, d.Reason, "reached without a definitive answer; last error: status 503")
	})
	t.Run("a wait past the horizon is cut to one last attempt", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp.Header.Set("Retry-After", "7200")
		d := Decide(ctx, f)
		require.Equal(t, Retry, d.Kind)
		require.Equal(t, f.Horizon.At.Add(-f.Horizon.Lead()), d.At)
	})
	t.Run("an advertised window shortens the horizon", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp.Header.Set("Idempotency-Window", "600")
		d := Decide(ctx, f)
		require.Equal(t, 600*time.Second, d.Learned)
		require.Equal(t, now.Add(600*time.Second-time.Minute), d.Horizon.At)
	})
	t.Run("a lost answer: unanswered, probe cap", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp, f.Attempt = nil, 3
		f.Err = &url.Error{Op: "Post", URL: "https://h/x?token=secret", Err: errors.New("read: connection reset by peer")}
		f.Backoff = func(time.Duration, time.Duration, int, *http.Response) time.Duration { return 20 * time.Second }
		f.Probe = time.Second
		d := Decide(ctx, f)
		require.Equal(t, Retry, d.Kind)
		require.Equal(t, 3, d.Unanswered, "its answer is lost")
		require.True(t, d.Probing)
		require.Equal(t, now.Add(time.Second), d.At)
		require.Equal(t, "read: connection reset by peer", d.AttemptError, "no URL")
		require.False(t, d.NotSent)
	})
	t.Run("a refused connection was never sent", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp = nil
		f.Err = &url.Error{Op: "Post", URL: "https://h/x", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
		d := Decide(ctx, f)
		require.True(t, d.NotSent)
		require.Zero(t, d.Unanswered)
	})
	t.Run("the policy gives up", func(t *testing.T) {
		f := decideFacts(now)
		f.CheckRetry = func(context.Context, *http.Response, error) (bool, error) { return false, errors.New("enough") }
		d := Decide(ctx, f)
		require.Equal(t, Failed, d.Kind)
		require.False(t, d.Answered, "a given-up answer is not the outcome")
		require.Equal(t, "gave up: enough", d.Reason)
	})
	t.Run("the send hook refused: backoff, nothing sent", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp, f.Skipped = nil, errors.New("no token")
		d := Decide(ctx, f)
		require.Equal(t, Retry, d.Kind)
		require.Equal(t, now.Add(2*time.Second), d.At)
		require.True(t, d.NotSent)
		require.Equal(t, "send hook: no token", d.Reason)
		f.Horizon.At = now.Add(time.Second)
		require.Equal(t, Expired, Decide(ctx, f).Kind)
	})
	t.Run("an unsendable request after a lost answer is unknown", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp, f.Unsendable, f.Unanswered = nil, errors.New("bad URL"), 1
		d := Decide(ctx, f)
		require.Equal(t, Unknown, d.Kind)
		require.Contains(t, d.Reason, "cannot build request: bad URL")
	})
	t.Run("a body over 10 MiB is cut", func(t *testing.T) {
		f := decideFacts(now)
		f.Resp.StatusCode = 200
		f.Body = make([]byte, MaxBodySize+1)
		d := Decide(ctx, f)
		require.Equal(t, Succeeded, d.Kind)
		require.Equal(t, "response body cut at 10 MiB", d.Reason)
	})
}

func TestBudget(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at, limited := Budget{}.Allow(now)
	require.Equal(t, now, at)
	require.False(t, limited)
	at, limited = Budget{Max: 2, Oldest: now.Add(-30 * time.Minute)}.Allow(now)
	require.Equal(t, now.Add(30*time.Minute), at)
	require.True(t, limited)
	at, limited = Budget{Max: 2, Oldest: now.Add(-2 * time.Hour)}.Allow(now)
	require.Equal(t, now, at)
	require.False(t, limited)
}

func TestHorizon(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	h := NewHorizon(now, time.Time{}, time.Hour, 0, time.Minute, time.Time{})
	require.Equal(t, now.Add(59*time.Minute), h.At, "first attempt now, margin min(1m, 6m)")
	h = NewHorizon(now, now, time.Hour, 10*time.Minute, time.Minute, time.Time{})
	require.Equal(t, now.Add(9*time.Minute), h.At, "the host's shorter window")
	h = NewHorizon(now, now, time.Hour, 0, time.Minute, now.Add(time.Minute))
	require.Equal(t, now.Add(time.Minute), h.At, "a stored horizon only moves earlier")
	learned := NewHorizon(now, now, time.Hour, 0, time.Minute, time.Time{}).Learn(30 * time.Second)
	require.Equal(t, now.Add(27*time.Second), learned.At, "learn: a 30 s window keeps a 3 s margin")
	require.Equal(t, learned, learned.Learn(time.Hour), "a longer window changes nothing")
}
