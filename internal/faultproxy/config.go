package faultproxy

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"time"
)

const (
	// MaxDelayDefault is the default Config.MaxDelay.
	MaxDelayDefault = 50 * time.Millisecond
	// RetryAfterDefault is the default Config.RetryAfter.
	RetryAfterDefault = 1 * time.Second
	// ChunkSizeDefault is the default Config.ChunkSize.
	ChunkSizeDefault = 8
	// ChunkPauseDefault is the default Config.ChunkPause.
	ChunkPauseDefault = 1 * time.Millisecond
	// MaxChunkPause is the largest accepted Config.ChunkPause, so that a
	// misconfigured proxy cannot stall a test.
	MaxChunkPause = 1 * time.Second
	// MaxDelayLimit is the largest accepted Config.MaxDelay, for the same
	// reason.
	MaxDelayLimit = 30 * time.Second
)

// ErrInvalidConfig is wrapped by every error Start returns for a bad Config.
var ErrInvalidConfig = errors.New("faultproxy: invalid config")

// Rates are the probabilities of each fault, per request. Each is within
// [0, 1] and their sum is at most 1; ActionPass takes the rest. A rate of 0
// never fires, a rate of 1 always fires.
type Rates struct {
	// DropResponse is the probability of ActionDropResponse. Defaults to 0.
	DropResponse float64
	// Reset is the probability of ActionReset. Defaults to 0.
	Reset float64
	// Unavailable is the probability of ActionUnavailable. Defaults to 0.
	Unavailable float64
	// Delay is the probability of ActionDelay. Defaults to 0.
	Delay float64
	// SlowWrite is the probability of ActionSlowWrite. Defaults to 0.
	SlowWrite float64
}

// of returns the rate of a fault action; 0 for ActionPass.
func (r Rates) of(a Action) float64 {
	switch a {
	case ActionDropResponse:
		return r.DropResponse
	case ActionReset:
		return r.Reset
	case ActionUnavailable:
		return r.Unavailable
	case ActionDelay:
		return r.Delay
	case ActionSlowWrite:
		return r.SlowWrite
	}
	return 0
}

func (r Rates) validate() error {
	sum := 0.0
	for _, a := range faultOrder {
		v := r.of(a)
		if math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("%w: Rates.%s must be within [0, 1], got %v", ErrInvalidConfig, rateField(a), v)
		}
		sum += v
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("%w: Rates must sum to at most 1, got %v", ErrInvalidConfig, sum)
	}
	return nil
}

func rateField(a Action) string {
	switch a {
	case ActionDropResponse:
		return "DropResponse"
	case ActionReset:
		return "Reset"
	case ActionUnavailable:
		return "Unavailable"
	case ActionDelay:
		return "Delay"
	case ActionSlowWrite:
		return "SlowWrite"
	}
	return string(a)
}

// Config configures a Proxy. Only Upstream is required.
type Config struct {
	// Upstream is the base URL requests are forwarded to, e.g.
	// "http://127.0.0.1:8080". Its host must be a loopback address or
	// "localhost"; the request path and query are appended to its path.
	// Required; there is no default.
	Upstream string
	// Seed seeds every decision. Defaults to 0 (which is a seed like any
	// other).
	Seed uint64
	// Mode chooses what a decision is keyed by. Defaults to ModeSequence.
	Mode Mode
	// Rates are the fault probabilities. Defaults to all zero: every
	// request passes through.
	Rates Rates
	// DecideFunc, when set, replaces the seeded choice of action (Seed,
	// Mode and Rates then only feed the delay length). Use it to script a
	// fault for one specific request. Defaults to nil: the seeded choice.
	DecideFunc DecideFunc
	// MaxDelay bounds the wait of ActionDelay; the wait is drawn uniformly
	// from [0, MaxDelay]. At most MaxDelayLimit. Defaults to
	// MaxDelayDefault.
	MaxDelay time.Duration
	// RetryAfter is sent, in whole seconds (at least 1), in the Retry-After
	// header of ActionUnavailable. Defaults to RetryAfterDefault.
	RetryAfter time.Duration
	// ChunkSize is the number of body bytes per write of ActionSlowWrite.
	// Defaults to ChunkSizeDefault.
	ChunkSize int
	// ChunkPause is the pause between two writes of ActionSlowWrite, at
	// most MaxChunkPause. Defaults to ChunkPauseDefault.
	ChunkPause time.Duration
	// Transport forwards requests upstream. Defaults to a new http.Transport
	// owned by the Proxy, whose idle connections Close closes.
	Transport http.RoundTripper
	// Logger, when set, gets one Info line per request with the fields of
	// its Record. Defaults to nil: no logging.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c (or of the zero Config if c is nil) with
// every unset field filled in with its default.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Mode = cmp.Or(out.Mode, ModeSequence)
	out.MaxDelay = cmp.Or(out.MaxDelay, MaxDelayDefault)
	out.RetryAfter = cmp.Or(out.RetryAfter, RetryAfterDefault)
	out.ChunkSize = cmp.Or(out.ChunkSize, ChunkSizeDefault)
	out.ChunkPause = cmp.Or(out.ChunkPause, ChunkPauseDefault)
	return &out
}

// validate checks a Config that went through WithDefaults and returns the
// parsed upstream URL.
func (c *Config) validate() (*url.URL, error) {
	if c.Upstream == "" {
		return nil, fmt.Errorf("%w: Upstream is required", ErrInvalidConfig)
	}
	u, err := url.Parse(c.Upstream)
	if err != nil {
		return nil, fmt.Errorf("%w: Upstream: %v", ErrInvalidConfig, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: Upstream must be an http or https URL, got %q", ErrInvalidConfig, c.Upstream)
	}
	if !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("%w: Upstream host must be loopback, got %q", ErrInvalidConfig, u.Hostname())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: Upstream must not have a query or fragment, got %q", ErrInvalidConfig, c.Upstream)
	}
	if c.Mode != ModeSequence && c.Mode != ModeKeyed {
		return nil, fmt.Errorf("%w: Mode must be %q or %q, got %q", ErrInvalidConfig, ModeSequence, ModeKeyed, c.Mode)
	}
	if err := c.Rates.validate(); err != nil {
		return nil, err
	}
	if c.MaxDelay < 0 || c.MaxDelay > MaxDelayLimit {
		return nil, fmt.Errorf("%w: MaxDelay must be within [0, %v], got %v", ErrInvalidConfig, MaxDelayLimit, c.MaxDelay)
	}
	if c.RetryAfter < 0 {
		return nil, fmt.Errorf("%w: RetryAfter must not be negative, got %v", ErrInvalidConfig, c.RetryAfter)
	}
	if c.ChunkSize < 1 {
		return nil, fmt.Errorf("%w: ChunkSize must be positive, got %d", ErrInvalidConfig, c.ChunkSize)
	}
	if c.ChunkPause < 0 || c.ChunkPause > MaxChunkPause {
		return nil, fmt.Errorf("%w: ChunkPause must be within [0, %v], got %v", ErrInvalidConfig, MaxChunkPause, c.ChunkPause)
	}
	return u, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
