package policy

import (
	"context"
	"crypto/x509"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idemkit/internal/wire"
)

// The base (min) and cap (max) passed to a BackoffFunc.
const (
	BackoffBase = 500 * time.Millisecond
	BackoffCap  = 30 * time.Second
)

// CheckRetryFunc decides, after an attempt the profile does not decide,
// whether to retry (go-retryablehttp's CheckRetry; idemkit.Config.CheckRetry).
type CheckRetryFunc func(ctx context.Context, resp *http.Response, err error) (bool, error)

// BackoffFunc returns the wait before retry number attemptNum
// (go-retryablehttp's Backoff; idemkit.Config.Backoff).
type BackoffFunc func(min, max time.Duration, attemptNum int, resp *http.Response) time.Duration

// DefaultCheckRetry is idemkit.DefaultCheckRetry: it retries network errors and timeouts, 408, 425, every
// 5xx except 501, and a 409 or 429 that carries a valid Retry-After (the
// server asking to come back later). A 409 or 429 without one is a
// definitive answer unless the host's [Profile] lists it in Retry (the
// idemkit server's in-flight problem, Stripe's idempotency_key_in_use):
// a handler's own "invoice already paid" 409 is not retried for a day. It
// gives up on errors no retry can fix (an unsupported scheme, a bad TLS
// certificate, too many redirects, an invalid header: go-retryablehttp's
// classification) and when ctx ends. Anything else is a
// definitive answer. The Client never calls it for a replayed answer,
// which is always final.
func DefaultCheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if cerr := ctx.Err(); cerr != nil {
		return false, cerr
	}
	if err != nil {
		if PermanentTransportError(err) {
			return false, err
		}
		return true, nil
	}
	switch s := resp.StatusCode; {
	case s == 0:
		return true, nil
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly:
		return true, nil
	case s == http.StatusConflict, s == http.StatusTooManyRequests:
		_, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		return ok, nil
	case s == http.StatusNotImplemented:
		return false, nil
	case s >= 500:
		return true, nil
	}
	return false, nil
}

// PermanentTransportError reports a transport error no retry can fix, as
// go-retryablehttp classifies them (too many redirects, an unsupported
// scheme, an invalid header, a certificate that is not trusted), and a
// certificate error wrapped in anything else.
func PermanentTransportError(err error) bool {
	if retry, _ := retryablehttp.ErrorPropagatedRetryPolicy(context.Background(), nil, err); !retry {
		return true
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// DefaultBackoff is the default idemkit.Config.Backoff: exponential backoff with
// full jitter, a uniformly random wait in [0, min(max, min·2^attemptNum)).
func DefaultBackoff(min, max time.Duration, attemptNum int, resp *http.Response) time.Duration {
	if min <= 0 {
		min = BackoffBase
	}
	if max < min {
		max = min
	}
	ceiling := max
	if attemptNum < 62 {
		if d := min << attemptNum; d > 0 && d < max {
			ceiling = d
		}
	}
	return rand.N(ceiling) + time.Millisecond
}

// MaxRetryAfter bounds a parsed Retry-After so that adding it to a time
// cannot overflow; the horizon cuts every wait far shorter anyway.
const MaxRetryAfter = 100 * 365 * 24 * time.Hour

// ParseRetryAfter parses a Retry-After value: delta-seconds (digits only)
// or an HTTP-date, relative to now. Negative, fractional, signed or
// unparsable values are rejected (ok false); a date in the past is 0; huge
// values are capped at MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true // all digits, only too large
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > MaxRetryAfter:
		return MaxRetryAfter, true
	}
	return d, true
}

// RetryAfter returns the server-directed wait of a 409, 429 or 503 answer.
// An HTTP-date is read against the response's own Date header when it has
// one, so a skewed local clock does not stretch or shrink the wait.
func RetryAfter(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	switch resp.StatusCode {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable:
	default:
		return 0, false
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		now = d
	}
	return ParseRetryAfter(v, now)
}

// ParseWindow reads an Idempotency-Window header: whole seconds, positive.
func ParseWindow(h http.Header) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get(wire.HeaderWindow))
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs <= 0 || secs > int64(MaxRetryAfter/time.Second) {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}

// MinServerWait is the floor added to the backoff when a Retry-After asks
// for less than floor plus backoff.
const MinServerWait = 100 * time.Millisecond

// Schedule is the pure wait computation: given the policy's
// backoff, the server's Retry-After (if any), the profile's shortest wait,
// now and the horizon, it returns when the next attempt may start, or ok
// false when no attempt may start before the horizon. A Retry-After is
// honoured but never shortens the wait below MinServerWait plus the
// backoff, which grows with every attempt: a "Retry-After: 0" (or a date
// already past, or the same short value over and over) cannot turn into a
// hot loop. A wait that would end past the horizon is cut short so that one
// last attempt starts lead before the horizon.
func Schedule(now, horizon time.Time, backoff, serverWait time.Duration, hasServerWait bool, minWait, lead time.Duration) (time.Time, bool) {
	wait := max(backoff, minWait)
	if hasServerWait {
		wait = max(serverWait, MinServerWait+backoff, minWait)
	}
	if wait < 0 {
		wait = 0
	}
	if next := now.Add(wait); !next.After(horizon) {
		return next, true
	}
	if last := horizon.Add(-lead); last.After(now) {
		return last, true
	}
	return time.Time{}, false
}

// NeverSent reports whether a transport error proves that the request did
// not leave this process: the connection could not be made (refused, no
// route, the name did not resolve).
func NeverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}
