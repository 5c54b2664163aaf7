package paymentsapi

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sealstore"
)

// Mode is how the idempotency record and the payment are committed.
type Mode string

const (
	// ModeTransactional claims the key, inserts the payment and stores the
	// response in one database transaction (server.ModeTransactional).
	ModeTransactional Mode = "transactional"
	// ModeLease commits the claim first with a lease and inserts the payment
	// separately, deduplicated by the key (a unique (account,
	// idempotency_key)): the pattern for effects outside the store's
	// database (server.ModeLease).
	ModeLease Mode = "lease"
)

// Defaults of [Config].
const (
	// DBDefault is the SQLite database file used without a DSN.
	DBDefault = "payments.db"
	// WindowDefault is how long a key is remembered.
	WindowDefault = 24 * time.Hour
	// ModeDefault is the commit mode.
	ModeDefault = ModeTransactional
	// SweepIntervalDefault is the interval of the expired-record sweeper.
	SweepIntervalDefault = time.Minute
)

// Config configures an [App]. The zero value is valid: an SQLite API in
// DBDefault.
type Config struct {
	// DSN, if set, is a PostgreSQL connection string: the API migrates and
	// uses PostgreSQL (pgxpool) and DB is ignored. A Redis URL
	// (redis://host:port/n, see IsRedisDSN) keeps the idempotency records
	// in Redis, in lease mode, and the ledger in DB. Defaults to "" (SQLite).
	DSN string

	// DB is the SQLite database file, created if missing. Used only without
	// DSN. Defaults to DBDefault ("payments.db").
	DB string

	// Window is how long a key is remembered and replayed; it is published
	// in Idempotency-Window. Must be at least 1s. Defaults to WindowDefault
	// (24h).
	Window time.Duration

	// Delay holds every payment handler this long before the payment is
	// made, to make the in-flight window visible. Defaults to 0.
	Delay time.Duration

	// DelayAfter holds every payment handler this long after the payment is
	// made (in lease mode: committed to the ledger), before it answers: a
	// process killed then leaves a payment made and its claim in progress,
	// the case the recoverer completes. Defaults to 0.
	DelayAfter time.Duration

	// Mode is ModeTransactional or ModeLease. Defaults to ModeDefault
	// (transactional).
	Mode Mode

	// LeaseDuration is, in lease mode, how long a claim holds before a retry
	// may take it over. Must be shorter than Window. Defaults to
	// 30s (the server's default), capped at half the Window.
	LeaseDuration time.Duration

	// LockTimeout is, in transactional mode, how long a claim waits on a
	// concurrent uncommitted claim of the same key before answering 409
	// (PostgreSQL; SQLite answers at once). Defaults to
	// 3s (the server's default).
	LockTimeout time.Duration

	// SweepInterval is the interval of the sweeper that deletes expired
	// idempotency records; a negative value runs no sweeper. Defaults to
	// SweepIntervalDefault (1m).
	SweepInterval time.Duration

	// AbortOnDisconnect makes a payment handler give up (and roll back) when
	// its client disconnects. Otherwise the handler finishes the payment
	// anyway, like a real server that cannot tell a lost client from a slow
	// one. Defaults to false.
	AbortOnDisconnect bool

	// OnChargeStartFunc, if set, is called when a payment handler has
	// validated its request and is about to make the payment (before Delay),
	// with the account and the Idempotency-Key. It runs on the handler's
	// goroutine and must not block. Defaults to nil.
	OnChargeStartFunc func(account, key string)

	// OnChargeMadeFunc, if set, is called when a payment handler has made
	// its payment (the ledger row is written) and before it answers, with
	// the account and the Idempotency-Key. It runs on the handler's
	// goroutine; it may block (tests hold a handler there to kill its
	// process between the payment and the stored response). Defaults to
	// nil.
	OnChargeMadeFunc func(account, key string)

	// Recover runs, in lease mode, a recoverer (server/recoverer) that
	// finishes payments whose process died between the payment and the
	// stored response: it finds their lapsed claims, and completes each
	// with the 201 the handler would have sent if the ledger has the
	// payment, or releases it if not. Defaults to false.
	Recover bool

	// RecoverInterval is the time between two passes of the recoverer.
	// Defaults to 30s.
	RecoverInterval time.Duration

	// RecoverMinAge is how long after its lease ended a claim is left to
	// its client's retry before the recoverer takes it. Defaults to
	// LeaseDuration.
	RecoverMinAge time.Duration

	// Logger receives one line per request and the API's errors. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// LogIdentifiers logs idempotency keys and principals (the account,
	// which is the bearer token in this demo) as they are. Otherwise every
	// log attribute named key or principal, the middleware's included, is
	// replaced by its hash (internal/redact.Hash, the form `idemkit store
	// inflight` prints). Defaults to false.
	LogIdentifiers bool

	// WaitInFlight, if positive, holds a duplicate of a payment still in
	// flight up to this long for the original's answer instead of a 409
	// (server.Config.WaitInFlight). Defaults to 0 (409 at once).
	WaitInFlight time.Duration

	// RevokedAccounts are accounts whose stored payment responses are no
	// longer replayed: a retry of theirs is answered 403 replay-forbidden
	// (server.Config.AuthorizeReplayFunc). Defaults to nil (every replay is
	// served).
	RevokedAccounts []string

	// EncryptionKey, if set, is a 32-byte AES-256 key: stored responses
	// are sealed with it at rest (server/sealstore: AES-256-GCM bound to
	// the request's scope). Defaults to nil (stored as they are).
	EncryptionKey []byte

	// Metrics, if set, receives the API's Prometheus metrics (package
	// server/prommetrics, with the label store set to the backend): the
	// middleware's counters and the store's health, its sweeper's
	// included. Defaults to nil (no metrics).
	Metrics prometheus.Registerer
}

// WithDefaults returns a copy of c (which may be nil) with every unset field
// set to its default.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	if (out.DSN == "" || IsRedisDSN(out.DSN)) && out.DB == "" {
		out.DB = DBDefault
	}
	if out.Window == 0 {
		out.Window = WindowDefault
	}
	if out.Mode == "" {
		out.Mode = DefaultMode(out.DSN)
	}
	if out.LeaseDuration == 0 {
		out.LeaseDuration = min(30*time.Second, out.Window/2)
	}
	if out.LockTimeout == 0 {
		out.LockTimeout = 3 * time.Second
	}
	if out.SweepInterval == 0 {
		out.SweepInterval = SweepIntervalDefault
	}
	if out.Recover {
		out.RecoverInterval = cmp.Or(out.RecoverInterval, recoverIntervalDefault)
		out.RecoverMinAge = cmp.Or(out.RecoverMinAge, out.LeaseDuration)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// validate returns an error naming every field that is wrong. Call it on a
// Config with defaults.
func (c *Config) validate() error {
	var errs []error
	if n := len(c.EncryptionKey); n != 0 && n != sealstore.KeySize {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.EncryptionKey is %d bytes, want %d", n, sealstore.KeySize))
	}
	if c.Window < time.Second {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.Window must be at least 1s, got %v", c.Window))
	}
	if c.DelayAfter < 0 {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.DelayAfter must not be negative, got %v", c.DelayAfter))
	}
	if c.Delay < 0 {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.Delay must not be negative, got %v", c.Delay))
	}
	if c.Mode != ModeTransactional && c.Mode != ModeLease {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.Mode must be %q or %q, got %q", ModeTransactional, ModeLease, c.Mode))
	}
	if IsRedisDSN(c.DSN) && c.Mode != ModeLease {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.Mode must be %q with a Redis DSN (Redis cannot share a transaction with the ledger), got %q", ModeLease, c.Mode))
	}
	if c.LeaseDuration <= 0 || c.LeaseDuration >= c.Window {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.LeaseDuration must be positive and shorter than Config.Window (%v), got %v", c.Window, c.LeaseDuration))
	}
	if c.WaitInFlight < 0 {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.WaitInFlight must not be negative, got %v", c.WaitInFlight))
	}
	if c.LockTimeout < 0 {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.LockTimeout must not be negative, got %v", c.LockTimeout))
	}
	errs = append(errs, c.validateRecover()...)
	if errs != nil {
		return errors.Join(errs...)
	}
	return nil
}

// serverMode is the middleware mode of c.Mode.
func (c *Config) serverMode() server.Mode {
	if c.Mode == ModeLease {
		return server.ModeLease
	}
	return server.ModeTransactional
}
