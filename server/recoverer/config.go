package recoverer

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of Config.
const (
	intervalDefault     = 30 * time.Second
	batchDefault        = 100
	minAgeDefault       = time.Minute
	leaseDefault        = 30 * time.Second
	maxAttemptsDefault  = 5
	storeTimeoutDefault = 5 * time.Second
)

// Config configures a Recoverer. The zero value is valid.
type Config struct {
	// Interval is the time between two passes. Defaults to 30s.
	Interval time.Duration
	// Batch is the most claims one pass lists (the oldest first) and
	// looks at. Claims whose lease is still held count against it, so keep
	// it above the number of handlers that run longer than MinAge at once.
	// Defaults to 100.
	Batch int
	// MinAge is how long after its lease ended a claim is left to its
	// client's retry before the recoverer takes it: a claim is recovered
	// only once its LockedUntil is MinAge or more in the past by the
	// recoverer's clock (the store's own clock still decides the takeover,
	// so a recoverer whose clock runs ahead cannot take a live lease). It
	// also absorbs the skew between the recoverer's clock and the store's.
	// Defaults to 1m.
	MinAge time.Duration
	// Lease is the lease of the recoverer's own claim while the
	// RecoverFunc runs: the RecoverFunc's context ends 5% before it, and a
	// claim the RecoverFunc leaves (an error) lapses after it, for the next
	// pass or a client retry. Defaults to 30s.
	Lease time.Duration
	// MaxAttempts is how many times the recoverer tries one claim (one
	// request: the record's scope and creation time) whose RecoverFunc
	// keeps failing before it stops (OutcomeSkipped, reason "gave_up") and
	// leaves it to a client retry or its expiry. The count is in memory:
	// a restart starts it afresh. Defaults to 5.
	MaxAttempts int
	// StoreTimeout bounds each store call: the listing, the claim, the
	// completion and the release. Defaults to 5s.
	StoreTimeout time.Duration
	// OnEventFunc, if set, is called once for every claim a pass looked
	// at, with what became of it, on the recoverer's goroutine: it must not
	// block. Defaults to nil.
	OnEventFunc func(Event)
	// Logger receives a line per recovered, released or failed claim (the
	// key and the principal hashed) and per failed pass. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every zero field set to its
// default. It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Interval = cmp.Or(out.Interval, intervalDefault)
	out.Batch = cmp.Or(out.Batch, batchDefault)
	out.MinAge = cmp.Or(out.MinAge, minAgeDefault)
	out.Lease = cmp.Or(out.Lease, leaseDefault)
	out.MaxAttempts = cmp.Or(out.MaxAttempts, maxAttemptsDefault)
	out.StoreTimeout = cmp.Or(out.StoreTimeout, storeTimeoutDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// validate returns an error naming every field that is wrong. Call it on a
// Config with defaults.
func (c *Config) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Interval", c.Interval}, {"MinAge", c.MinAge}, {"Lease", c.Lease}, {"StoreTimeout", c.StoreTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("idemkit/server/recoverer: Config.%s must not be negative, got %v", d.name, d.v))
		}
	}
	if c.Batch < 0 {
		errs = append(errs, fmt.Errorf("idemkit/server/recoverer: Config.Batch must not be negative, got %d", c.Batch))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("idemkit/server/recoverer: Config.MaxAttempts must not be negative, got %d", c.MaxAttempts))
	}
	return errors.Join(errs...)
}
