package idemriver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
)

// QueueDefault is the River queue intents are inserted in and worked from,
// unless Config.Queue names another.
const QueueDefault = "idemkit"

// Config configures a Client. The zero value is valid: every field has a
// default.
type Config struct {
	// Queue is the River queue of the intents. Defaults to QueueDefault.
	Queue string

	// Schema is the PostgreSQL schema of River's tables and this package's
	// (as given to Migrate). Defaults to empty: the connection's search_path.
	Schema string

	// MaxWorkers is how many intents one Client sends at once. Defaults to 4.
	MaxWorkers int

	// FetchPollInterval is how often an idle worker looks for due intents
	// (River's; an insert wakes workers at once through LISTEN/NOTIFY unless
	// PollOnly). Defaults to 1s.
	FetchPollInterval time.Duration

	// PollOnly makes River poll instead of LISTEN (PgBouncer in transaction
	// mode; tests). Defaults to false.
	PollOnly bool

	// HTTPClient sends the attempts; redirects are not followed unless it
	// sets CheckRedirect. Defaults to a client on a pooled transport of its
	// own.
	HTTPClient *http.Client

	// Window is the longest retention window relied on for hosts whose
	// profile publishes none. The effective window of an intent is the
	// smaller of that and the Idempotency-Window its host last advertised
	// (remembered per host in the database). Defaults to 24h.
	Window time.Duration

	// SafetyMargin is subtracted from the effective window to get the
	// horizon (at most a tenth of the window). Defaults to 1m.
	SafetyMargin time.Duration

	// CredentialHeaders are request headers never stored: names, or
	// "*-Suffix" patterns. They are dropped at submit; SendHookFunc supplies
	// them. Defaults to the root package's list (Authorization,
	// Proxy-Authorization, Cookie, X-Api-Key, Api-Key, X-Auth-Token,
	// X-Amz-Security-Token, *-Token, *-Secret, *-Api-Key, *-Password,
	// *-Credential, *-Credentials, *-Session).
	CredentialHeaders []string

	// AllowURLCredentials accepts URLs whose query carries a parameter that
	// looks like a credential (api_key, token, client_secret, …), which would
	// be stored with the URL. Defaults to false.
	AllowURLCredentials bool

	// OutcomeHeaders are the response headers stored with an outcome (names
	// or "*-Suffix" patterns), besides the profile's replay markers; never
	// Set-Cookie nor a credential header. Defaults to Content-Type,
	// Content-Language, Location, Date, ETag, Last-Modified, Retry-After,
	// Idempotency-Window, Request-Id and X-Request-Id.
	OutcomeHeaders []string

	// OmitOutcomeBody stores outcomes with their status and replay marker
	// only. Defaults to false.
	OmitOutcomeBody bool

	// Profile is the idempotency dialect of hosts not in Profiles (see
	// KnownProfile). Defaults to KnownProfile("idemkit").
	Profile *Profile

	// Profiles maps a host, as in the request URL ("api.stripe.com", or
	// "host:port" to tell ports apart), to the dialect it speaks. Defaults
	// to none.
	Profiles map[string]Profile

	// CheckRetry decides, after each attempt the host's Profile does not
	// decide, whether to retry (see idemkit.Config.CheckRetry). Defaults to
	// idemkit.DefaultCheckRetry.
	CheckRetry func(ctx context.Context, resp *http.Response, err error) (bool, error)

	// MaxAttemptsPerHour bounds the attempts of one intent in any hour,
	// whatever the server says. Defaults to 120.
	MaxAttemptsPerHour int

	// SendHookFunc is called before every attempt with the intent's host
	// (as in the URL) and the request about to be sent: add credentials
	// here. An error skips the attempt and retries it after a backoff.
	// Defaults to nil.
	SendHookFunc func(host string, r *http.Request) error

	// Backoff returns the wait before retry attemptNum (0 for the first),
	// between min and max (500ms and 30s), when no Retry-After says
	// otherwise. The signature is go-retryablehttp's. Defaults to
	// exponential backoff with full jitter.
	Backoff func(min, max time.Duration, attemptNum int, resp *http.Response) time.Duration

	// AttemptTimeout bounds one HTTP attempt, reading the body included.
	// Defaults to 30s.
	AttemptTimeout time.Duration

	// LeaseDuration is how long a worker may hold an intent's job before
	// another Client takes it over (the worker died). Must exceed
	// AttemptTimeout. Defaults to 2m.
	LeaseDuration time.Duration

	// JobRetentionPeriod is how long River keeps the jobs of finished
	// intents (completed, and cancelled: failed, unknown, expired) before its
	// job cleaner deletes them, and Get and Wait return ErrNotFound; -1 keeps
	// them. The cleaner runs on the River leader, which may be any River
	// client of the database: give them all the same setting. Defaults to
	// River's 24h.
	JobRetentionPeriod time.Duration

	// Logger receives the logs of the Client and of its River client.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// The defaults of Config.
const (
	maxWorkersDefault         = 4
	windowDefault             = 24 * time.Hour
	safetyMarginDefault       = time.Minute
	maxAttemptsPerHourDefault = policy.HourlyAttemptsDefault
	attemptTimeoutDefault     = 30 * time.Second
	leaseDurationDefault      = 2 * time.Minute
	fetchPollIntervalDefault  = time.Second
)

// WithDefaults returns a copy of c (which may be nil) with every unset field
// set to its default.
func (c *Config) WithDefaults() *Config {
	var d Config
	if c != nil {
		d = *c
	}
	d.Queue = cmp.Or(d.Queue, QueueDefault)
	d.MaxWorkers = cmp.Or(d.MaxWorkers, maxWorkersDefault)
	d.FetchPollInterval = cmp.Or(d.FetchPollInterval, fetchPollIntervalDefault)
	d.Window = cmp.Or(d.Window, windowDefault)
	d.SafetyMargin = cmp.Or(d.SafetyMargin, safetyMarginDefault)
	if d.CredentialHeaders == nil {
		d.CredentialHeaders = policy.CredentialHeadersDefault
	}
	if d.OutcomeHeaders == nil {
		d.OutcomeHeaders = policy.OutcomeHeadersDefault
	}
	d.MaxAttemptsPerHour = cmp.Or(d.MaxAttemptsPerHour, maxAttemptsPerHourDefault)
	if d.Backoff == nil {
		d.Backoff = policy.DefaultBackoff
	}
	if d.CheckRetry == nil {
		d.CheckRetry = policy.DefaultCheckRetry
	}
	d.AttemptTimeout = cmp.Or(d.AttemptTimeout, attemptTimeoutDefault)
	d.LeaseDuration = cmp.Or(d.LeaseDuration, leaseDurationDefault)
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return &d
}

// ErrInvalidConfig is returned by NewClient for a Config it cannot use; the
// error names the field.
var ErrInvalidConfig = errors.New("idemriver: invalid config")

func (c *Config) validate() error {
	switch {
	case c.MaxWorkers < 0:
		return fmt.Errorf("%w: MaxWorkers %d is negative", ErrInvalidConfig, c.MaxWorkers)
	case c.Window < 0, c.SafetyMargin < 0, c.AttemptTimeout < 0, c.LeaseDuration < 0, c.FetchPollInterval < 0:
		return fmt.Errorf("%w: a negative duration", ErrInvalidConfig)
	case c.JobRetentionPeriod < -1:
		return fmt.Errorf("%w: JobRetentionPeriod %v: -1 (keep) or positive", ErrInvalidConfig, c.JobRetentionPeriod)
	case c.MaxAttemptsPerHour < 0:
		return fmt.Errorf("%w: MaxAttemptsPerHour %d is negative", ErrInvalidConfig, c.MaxAttemptsPerHour)
	case c.LeaseDuration <= c.AttemptTimeout:
		return fmt.Errorf("%w: LeaseDuration %v must exceed AttemptTimeout %v", ErrInvalidConfig, c.LeaseDuration, c.AttemptTimeout)
	}
	return nil
}

// jobTimeout is River's JobTimeout: between the attempt timeout and the
// lease, so that a live worker has returned its job before another Client
// may take it over.
func (c *Config) jobTimeout() time.Duration {
	return c.AttemptTimeout + (c.LeaseDuration-c.AttemptTimeout)/2
}
