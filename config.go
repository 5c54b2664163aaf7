package idemkit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/idemkit/idemkit/internal/policy"
)

// Defaults of [Config], as its field docs state them.
const (
	windowDefault         = 24 * time.Hour // Stripe's
	safetyMarginDefault   = time.Minute
	maxSleepDefault       = 30 * time.Second
	leaseDurationDefault  = 2 * time.Minute
	attemptTimeoutDefault = 30 * time.Second
	concurrencyDefault    = 4
)

// maxAttemptsPerHourDefault is the default Config.MaxAttemptsPerHour: one
// attempt every 30 s on average, the backoff cap.
const maxAttemptsPerHourDefault = policy.HourlyAttemptsDefault

// Config configures a [Client]. The zero value is valid: every field has a
// default.
type Config struct {
	// HTTPClient sends the attempts. It is copied with Timeout set to
	// AttemptTimeout (or kept if shorter) and, unless it sets
	// CheckRedirect, redirects not followed (a 3xx is a definitive answer:
	// following a 302 would turn a POST into a GET). Defaults to a client
	// on a pooled transport of its own that Close releases.
	HTTPClient *http.Client

	// Window is the longest retention window the client relies on, for
	// hosts whose Profile publishes none (Profile.Window replaces it for
	// the others: Stripe's 24 h, Adyen's 31 days). The effective window of
	// an intent is the smaller of that and the Idempotency-Window its host
	// last advertised (remembered in the queue). Defaults to 24h (Stripe's
	// window).
	Window time.Duration

	// SafetyMargin is subtracted from the effective window to get the
	// horizon; the margin used is the smaller of SafetyMargin and a tenth of
	// the effective window (a 30 s window keeps a 3 s margin). It should
	// exceed AttemptTimeout plus clock skew. Defaults to 1m.
	SafetyMargin time.Duration

	// CredentialHeaders are request headers never written to the queue:
	// names, or "*-Suffix" patterns matching every header that ends so. A
	// process keeps those given to Submit or Do in memory; one that resumes
	// the intent later gets them from SendHookFunc. They are also never
	// stored from a response. Defaults to Authorization,
	// Proxy-Authorization, Cookie, X-Api-Key, Api-Key, X-Auth-Token,
	// X-Amz-Security-Token, *-Token, *-Secret, *-Api-Key, *-Password,
	// *-Credential, *-Credentials and *-Session.
	CredentialHeaders []string

	// StoredHeaders, when not nil, switches to allowlist mode: only these
	// request headers (names or "*-Suffix" patterns) are written to the
	// queue, and every other one is treated as a credential. Defaults to
	// nil (the CredentialHeaders denylist).
	StoredHeaders []string

	// AllowURLCredentials accepts URLs whose query carries a parameter
	// that looks like a credential (api_key, key, token, access_token,
	// secret, client_secret, password, signature, …), which would be
	// written to the queue with the URL. Defaults to false: such a Request
	// is refused with ErrInvalidRequest.
	AllowURLCredentials bool

	// OutcomeHeaders are the response headers stored with an Outcome (names
	// or "*-Suffix" patterns), besides the host profile's replay markers
	// and key header; Set-Cookie and CredentialHeaders never are. Defaults
	// to Content-Type, Content-Language, Location, Date, ETag,
	// Last-Modified, Retry-After, Idempotency-Window, Request-Id and
	// X-Request-Id.
	OutcomeHeaders []string

	// OmitOutcomeBody keeps response bodies and headers out of the queue:
	// an Outcome is stored with its status and replay marker only, for
	// callers who must not hold receipts on disk. Do still returns the
	// body (from memory) to its caller; Get, Wait and List do not.
	// Defaults to false.
	OmitOutcomeBody bool

	// Profile is the idempotency dialect of hosts not in Profiles (see
	// [KnownProfile]). Defaults to KnownProfile("idemkit").
	Profile *Profile

	// Profiles maps a host, as in the request URL ("api.stripe.com", or
	// "host:port" to tell ports apart), to the dialect it speaks:
	//
	//	stripe, _ := idemkit.KnownProfile("stripe")
	//	cfg.Profiles = map[string]idemkit.Profile{"api.stripe.com": stripe}
	//
	// A host:port entry wins over the host's own. Defaults to none.
	Profiles map[string]Profile

	// MaxAttemptsPerHour bounds the attempts of one intent in any hour,
	// whatever the server says (a Retry-After of 0, over and over): once
	// reached, the next attempt waits until the oldest of them is an hour
	// old. Defaults to 120 (one every 30 s on average, the backoff cap).
	MaxAttemptsPerHour int

	// MaxAttempts, if positive, bounds the attempts this Client starts
	// for one intent (counted in memory since Open or NewClient): once an
	// intent reached it without a definitive answer, it stays pending with
	// its next attempt time, Run and Drain no longer claim it, and Do
	// returns it with an error matching StatePending. Another Client (a
	// later run) may send it again. Defaults to 0: only the horizon ends
	// the retries.
	MaxAttempts int

	// SendHookFunc is called before every attempt, with the intent's host
	// (as in the URL: "api.stripe.com", or "host:port") and the request
	// about to be sent: add credentials here, for that host only (a process
	// resuming an intent after a restart has no other source for them). An
	// error skips the attempt and reschedules the intent. Defaults to nil.
	SendHookFunc func(host string, r *http.Request) error

	// CheckRetry decides, after each attempt the host's Profile does not
	// decide, whether to retry. It is called with the response (nil on a
	// transport error; its body already read, and readable again) and the
	// transport error. Return true to retry with the same key. Return false
	// with a nil error when resp is a definitive answer (2xx ends the intent
	// succeeded, anything else failed). Return false with an error to give
	// up: the intent ends failed with that error. The signature is that of
	// go-retryablehttp's CheckRetry, so its policies can be wrapped too.
	// Defaults to DefaultCheckRetry.
	CheckRetry func(ctx context.Context, resp *http.Response, err error) (bool, error)

	// Backoff returns how long to wait before retry number attemptNum (0
	// for the wait after the first attempt), between min and max, which are
	// always 500ms and 30s. resp is the last response, nil after a
	// transport error. A Retry-After on a 409, 429 or 503 overrides it
	// (see [Client.Do]). The signature is that of go-retryablehttp's
	// Backoff. Defaults to exponential backoff with full jitter: a
	// uniformly random wait in [0, min(max, min·2^attemptNum)).
	Backoff func(min, max time.Duration, attemptNum int, resp *http.Response) time.Duration

	// MaxSleep is the longest wait (backoff or Retry-After) slept inside the
	// process; a longer one is written to the queue as the intent's next
	// attempt time and the worker moves on. Defaults to 30s.
	MaxSleep time.Duration

	// LeaseDuration is how long a process owns an intent it is sending,
	// renewed at every attempt. Another process takes the intent over (with
	// a new fencing token) once the lease runs out, or at once if the
	// holder is a process on the same host that died: on Unix, no process
	// has its pid any more (on Linux also: the pid now belongs to a process
	// that started later); elsewhere only the end of the lease counts. A
	// holder on another host, or one that is alive but stuck, is waited
	// for. Must exceed AttemptTimeout. Defaults to 2m.
	LeaseDuration time.Duration

	// AttemptTimeout bounds one HTTP attempt, reading the response body
	// included. Defaults to 30s.
	AttemptTimeout time.Duration

	// Concurrency is how many intents Run sends at once. Defaults to 4.
	Concurrency int

	// OnEventFunc, if set, is called for every step of an intent in this
	// process: attempt started, answered, retrying, rescheduled, ended
	// (see [Event]). It is an observer: it runs synchronously on the
	// worker's goroutine, so it must return quickly, and nothing it does
	// changes what the client does next. Defaults to nil.
	OnEventFunc func(e Event)

	// Logger receives the client's logs: state changes (an intent ended)
	// at INFO, each attempt and retry at DEBUG, problems at WARN. It is
	// go-retryablehttp's LeveledLogger, which a *slog.Logger satisfies.
	// Defaults to slog.Default().
	Logger retryablehttp.LeveledLogger

	// timeNowFunc is the clock (tests inject one). Defaults to a wall clock
	// advanced by the monotonic clock.
	timeNowFunc func() time.Time
	// pollInterval defaults to pollIntervalDefault.
	pollInterval time.Duration
	// instanceHost overrides hostID() (tests play another host).
	instanceHost string
}

// WithDefaults returns a copy of c (which may be nil) with every unset field
// set to its default.
func (c *Config) WithDefaults() *Config {
	out := &Config{}
	if c != nil {
		*out = *c
	}
	out.Window = cmp.Or(out.Window, windowDefault)
	out.SafetyMargin = cmp.Or(out.SafetyMargin, safetyMarginDefault)
	if out.CredentialHeaders == nil {
		out.CredentialHeaders = policy.CredentialHeadersDefault
	}
	if out.OutcomeHeaders == nil {
		out.OutcomeHeaders = policy.OutcomeHeadersDefault
	}
	if out.CheckRetry == nil {
		out.CheckRetry = DefaultCheckRetry
	}
	if out.Backoff == nil {
		out.Backoff = policy.DefaultBackoff
	}
	out.MaxSleep = cmp.Or(out.MaxSleep, maxSleepDefault)
	out.LeaseDuration = cmp.Or(out.LeaseDuration, leaseDurationDefault)
	out.AttemptTimeout = cmp.Or(out.AttemptTimeout, attemptTimeoutDefault)
	out.Concurrency = cmp.Or(out.Concurrency, concurrencyDefault)
	out.MaxAttemptsPerHour = cmp.Or(out.MaxAttemptsPerHour, maxAttemptsPerHourDefault)
	if out.Profile == nil {
		p, _ := KnownProfile("idemkit")
		out.Profile = &p
	} else {
		p := policy.WithDefaults(*out.Profile)
		out.Profile = &p
	}
	if out.Profiles != nil {
		m := make(map[string]Profile, len(out.Profiles))
		for host, p := range out.Profiles {
			m[strings.ToLower(host)] = policy.WithDefaults(p)
		}
		out.Profiles = m
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	out.pollInterval = cmp.Or(out.pollInterval, pollIntervalDefault)
	return out
}

func (c *Config) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Window", c.Window}, {"SafetyMargin", c.SafetyMargin}, {"MaxSleep", c.MaxSleep},
		{"LeaseDuration", c.LeaseDuration}, {"AttemptTimeout", c.AttemptTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("idemkit: Config.%s must be positive, got %v", d.name, d.v)
		}
	}
	if c.Window < time.Second {
		return fmt.Errorf("idemkit: Config.Window must be at least 1s, got %v", c.Window)
	}
	if c.LeaseDuration <= c.AttemptTimeout {
		return fmt.Errorf("idemkit: Config.LeaseDuration (%v) must exceed Config.AttemptTimeout (%v), or a slow attempt could be taken over while in flight", c.LeaseDuration, c.AttemptTimeout)
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("idemkit: Config.Concurrency must be at least 1, got %d", c.Concurrency)
	}
	for _, l := range []struct {
		name  string
		names []string
	}{{"CredentialHeaders", c.CredentialHeaders}, {"StoredHeaders", c.StoredHeaders}, {"OutcomeHeaders", c.OutcomeHeaders}} {
		for _, h := range l.names {
			if !policy.ValidHeaderPattern(h) {
				return fmt.Errorf("idemkit: Config.%s: %q is not a header name or *-Suffix pattern", l.name, h)
			}
		}
	}
	if c.MaxAttempts < 0 {
		return fmt.Errorf("idemkit: Config.MaxAttempts must not be negative, got %d", c.MaxAttempts)
	}
	if c.MaxAttemptsPerHour < 1 {
		return fmt.Errorf("idemkit: Config.MaxAttemptsPerHour must be at least 1, got %d", c.MaxAttemptsPerHour)
	}
	if err := policy.Validate(c.Profile, "Config.Profile"); err != nil {
		return err
	}
	for host, p := range c.Profiles {
		if host == "" || strings.ContainsAny(host, "/?#@ ") {
			return fmt.Errorf("idemkit: Config.Profiles: %q is not a host", host)
		}
		if err := policy.Validate(&p, "Config.Profiles["+host+"]"); err != nil {
			return err
		}
	}
	return nil
}

// hosts is Profile and Profiles, as the policy and the queue read them.
func (c *Config) hosts() policy.Hosts { return policy.Hosts{Default: c.Profile, ByHost: c.Profiles} }

// profileFor returns the profile of the host of rawURL.
func (c *Config) profileFor(rawURL string) *Profile { return c.hosts().For(rawURL) }
