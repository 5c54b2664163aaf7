package policy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"31536000", 365 * 24 * time.Hour, true}, // a year: parsed, the horizon clamps it
		{"99999999999999999999999", MaxRetryAfter, true},
		{"-1", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"", 0, false},
		{"soon", 0, false},
		{"0x10", 0, false},
		{"Tue, 01 Dec 2026 09:00:30 GMT", 30 * time.Second, true},
		{"Tuesday, 01-Dec-26 09:01:00 GMT", time.Minute, true}, // RFC 850
		{"Tue Dec  1 09:00:05 2026", 5 * time.Second, true},    // ANSI C
		{"Mon, 30 Nov 2026 09:00:00 GMT", 0, true},             // in the past
		{"Tue, 01 Dec 2126 09:00:00 GMT", MaxRetryAfter, true},
		{"Tue, 32 Dec 2026 09:00:00 GMT", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, now)
		require.Equal(t, tc.ok, ok, "ParseRetryAfter(%q) ok", tc.in)
		require.Equal(t, tc.want, got, "ParseRetryAfter(%q)", tc.in)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	resp := func(status int, h ...string) *http.Response {
		r := &http.Response{StatusCode: status, Header: http.Header{}}
		for i := 0; i < len(h); i += 2 {
			r.Header.Set(h[i], h[i+1])
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *http.Response
		want time.Duration
		ok   bool
	}{
		{"409", resp(409, "Retry-After", "2"), 2 * time.Second, true},
		{"429", resp(429, "Retry-After", "3"), 3 * time.Second, true},
		{"503", resp(503, "Retry-After", "4"), 4 * time.Second, true},
		{"500 ignored", resp(500, "Retry-After", "4"), 0, false},
		{"none", resp(503), 0, false},
		{"nil", nil, 0, false},
		// The date is read against the server's Date, not the local clock
		// (which is 10 minutes behind here).
		{"server clock", resp(503, "Retry-After", "Tue, 01 Dec 2026 09:10:20 GMT", "Date", "Tue, 01 Dec 2026 09:10:00 GMT"), 20 * time.Second, true},
	} {
		got, ok := RetryAfter(tc.r, now)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.want, got, tc.name)
	}
}

func TestParseWindow(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"86400": 24 * time.Hour, "60": time.Minute, "0": 0, "-5": 0, "1.5": 0, "abc": 0, "": 0} {
		got, ok := ParseWindow(http.Header{"Idempotency-Window": {in}})
		require.Equal(t, want, got, in)
		require.Equal(t, want > 0, ok, in)
	}
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	for attempt := 0; attempt < 70; attempt++ {
		ceiling := BackoffCap
		if attempt < 6 {
			ceiling = min(BackoffBase<<attempt, BackoffCap)
		}
		for i := 0; i < 200; i++ {
			d := DefaultBackoff(BackoffBase, BackoffCap, attempt, nil)
			require.Greater(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceiling+time.Millisecond, "attempt %d", attempt)
		}
	}
	// Full jitter: the waits of one attempt number are spread out.
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[DefaultBackoff(BackoffBase, BackoffCap, 5, nil).Round(time.Millisecond)] = true
	}
	require.Greater(t, len(seen), 10, "got %d distinct waits, want jitter", len(seen))
}

func TestDefaultCheckRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for status, want := range map[int]bool{
		200: false, 201: false, 302: false, 400: false, 401: false, 404: false, 422: false,
		408: true, 409: false, 425: true, 429: false, 500: true, 502: true, 503: true, 504: true, 501: false,
	} {
		got, err := DefaultCheckRetry(ctx, &http.Response{StatusCode: status}, nil)
		require.NoError(t, err)
		require.Equal(t, want, got, "status %d", status)
	}
	// A 409 or 429 is "come back later" only with a Retry-After.
	for _, status := range []int{409, 429} {
		for ra, want := range map[string]bool{"1": true, "0": true, "Tue, 01 Dec 2026 09:00:30 GMT": true, "soon": false, "-1": false} {
			got, err := DefaultCheckRetry(ctx, &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {ra}}}, nil)
			require.NoError(t, err)
			require.Equal(t, want, got, "status %d, Retry-After %q", status, ra)
		}
	}
	got, err := DefaultCheckRetry(ctx, nil, errors.New("connection reset by peer"))
	require.NoError(t, err)
	require.True(t, got, "network errors are retried")

	got, err = DefaultCheckRetry(ctx, nil, &url.Error{Op: "Post", URL: "x", Err: x509.UnknownAuthorityError{}})
	require.Error(t, err)
	require.False(t, got, "a bad certificate is permanent")

	got, err = DefaultCheckRetry(ctx, nil, &url.Error{Op: "Post", URL: "x", Err: fmt.Errorf("unsupported protocol scheme %q", "ftp")})
	require.Error(t, err)
	require.False(t, got)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	got, err = DefaultCheckRetry(canceled, &http.Response{StatusCode: 503}, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, got)
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	horizon := now.Add(time.Hour)
	lead := time.Second
	for _, tc := range []struct {
		name      string
		now       time.Time
		backoff   time.Duration
		server    time.Duration
		hasServer bool
		want      time.Time
		wantOK    bool
	}{
		{"backoff", now, 2 * time.Second, 0, false, now.Add(2 * time.Second), true},
		{"server wait wins", now, 2 * time.Second, 10 * time.Second, true, now.Add(10 * time.Second), true},
		{"server says now: floor plus backoff, not a hot loop", now, 2 * time.Second, 0, true, now.Add(MinServerWait + 2*time.Second), true},
		{"a short server wait under a grown backoff: the backoff", now, 20 * time.Second, time.Second, true, now.Add(MinServerWait + 20*time.Second), true},
		{"the profile's shortest wait", now, time.Second, 0, false, now.Add(30 * time.Second), true},
		{"a year is clamped to the horizon", now, 0, 365 * 24 * time.Hour, true, horizon.Add(-lead), true},
		{"exactly at the horizon", now, time.Hour, 0, false, horizon, true},
		{"past the horizon", horizon.Add(time.Millisecond), time.Millisecond, 0, false, time.Time{}, false},
		{"too close to clamp", horizon.Add(-lead / 2), time.Minute, 0, false, time.Time{}, false},
		{"negative wait", now, -time.Second, 0, false, now, true},
	} {
		minWait := time.Duration(0)
		if strings.HasPrefix(tc.name, "the profile") {
			minWait = 30 * time.Second
		}
		got, ok := Schedule(tc.now, horizon, tc.backoff, tc.server, tc.hasServer, minWait, lead)
		require.Equal(t, tc.wantOK, ok, tc.name)
		require.Equal(t, tc.want, got, tc.name)
		if ok {
			require.False(t, got.After(horizon), "%s: got %v, after the horizon %v", tc.name, got, horizon)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "120", "-1", "+1", "1.5", " 7 ", "", "abc",
		"99999999999999999999999999", "Tue, 01 Dec 2026 09:00:30 GMT", "Tuesday, 01-Dec-26 09:01:00 GMT",
		"Tue Dec  1 09:00:05 2026", "Mon, 30 Nov 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %v, false: want 0 when rejected", v, d)
			}
			return
		}
		if d < 0 || d > MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v, out of [0, %v]", v, d, MaxRetryAfter)
		}
		// Whatever the server says, the schedule never passes the horizon.
		horizon := now.Add(time.Hour)
		if next, ok := Schedule(now, horizon, 0, d, true, 0, time.Second); ok && next.After(horizon) {
			t.Fatalf("Retry-After %q scheduled at %v, after the horizon %v", v, next, horizon)
		}
	})
}

// TestDefaultCheckRetry_TransportErrors: the transport errors no retry can
// fix give up (go-retryablehttp's classification: too many redirects, an
// unsupported scheme, an invalid header, an untrusted certificate; and a
// certificate error however wrapped); the others are retried.
func TestDefaultCheckRetry_TransportErrors(t *testing.T) {
	t.Parallel()
	ue := func(err error) error { return &url.Error{Op: "Post", URL: "https://h/x", Err: err} }
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
	}{
		{"connection refused", ue(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")), true},
		{"reset", ue(errors.New("read: connection reset by peer")), true},
		{"timeout", ue(context.DeadlineExceeded), true},
		{"redirects", ue(errors.New("stopped after 10 redirects")), false},
		{"scheme", ue(errors.New(`unsupported protocol scheme "ftp"`)), false},
		{"invalid header", ue(errors.New(`net/http: invalid header field value for "X-A"`)), false},
		{"untrusted", ue(errors.New("x509: certificate is not trusted")), false},
		{"unknown CA", ue(x509.UnknownAuthorityError{}), false},
		{"hostname", ue(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"}), false},
		{"wrapped certificate error", fmt.Errorf("attempt: %w", x509.CertificateInvalidError{Reason: x509.Expired}), false},
	} {
		retry, err := DefaultCheckRetry(context.Background(), nil, tc.err)
		require.Equal(t, tc.retry, retry, tc.name)
		if tc.retry {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, "%s: giving up says why", tc.name)
		}
	}
}
