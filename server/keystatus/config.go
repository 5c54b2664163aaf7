package keystatus

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/idemkit/idemkit/server"
)

// Defaults of Config.
const (
	windowDefault       = 24 * time.Hour
	storeTimeoutDefault = 5 * time.Second
	// endpointAny is the endpoint of a scope whose route names no
	// operation (the middleware's default).
	endpointAny = "*"
)

// ShowResponseFunc decides whether the lookup may show a completed
// record's stored response (status, replayable headers and body) to the
// caller of r, whose principal is s.Principal. It is called only for the
// caller's own record. Return false to show the status alone.
type ShowResponseFunc func(r *http.Request, s server.Scope, resp *server.StoredResponse) bool

// Config configures a Handler. PrincipalFunc is required.
type Config struct {
	// PrincipalFunc identifies the caller. Give it the middleware's own
	// (server.Config.PrincipalFunc): the lookup sees exactly the records
	// the caller's requests created. An error, or an empty principal, is
	// answered 401 unauthenticated. Defaults to nil, which New rejects.
	PrincipalFunc server.PrincipalFunc

	// Operations are the operation names (scope endpoints) the lookup
	// covers: those given with server.Operation or
	// server.Config.EndpointFunc on the routes whose keys it reports, and
	// "*" for routes that name none. Without ?endpoint= a lookup reads the
	// key under each of them (one Store.Get each, whatever the answer).
	// Defaults to ["*"], the middleware's scope when no route names an
	// operation.
	Operations []string

	// Window is the middleware's retention window, published on every
	// answer in the Idempotency-Window header (whole seconds), as the
	// middleware does: a client learns from it how long "unknown" stays
	// safe to resend. Defaults to 24h (the middleware's default).
	Window time.Duration

	// ShowResponseFunc, if set, is asked whether a completed record's
	// stored response may be shown. Defaults to nil: the status only
	// (response_status), never the headers or the body.
	ShowResponseFunc ShowResponseFunc

	// StoreTimeout bounds each Store.Get. Defaults to 5s.
	StoreTimeout time.Duration

	// Logger receives store errors. Defaults to slog.Default().
	Logger *slog.Logger

	// timeNowFunc is the clock (tests inject one). Defaults to time.Now.
	timeNowFunc func() time.Time
}

// WithDefaults returns a copy of c (which may be nil) with every unset
// field set to its default.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	if len(out.Operations) == 0 {
		out.Operations = []string{endpointAny}
	}
	out.Operations = slices.Clone(out.Operations)
	out.Window = cmp.Or(out.Window, windowDefault)
	out.StoreTimeout = cmp.Or(out.StoreTimeout, storeTimeoutDefault)
	out.Logger = cmp.Or(out.Logger, slog.Default())
	if out.timeNowFunc == nil {
		out.timeNowFunc = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	if c.PrincipalFunc == nil {
		return errors.New("idemkit/server/keystatus: Config.PrincipalFunc is required")
	}
	if c.Window < time.Second {
		return fmt.Errorf("idemkit/server/keystatus: Config.Window %v: must be at least 1s", c.Window)
	}
	if c.StoreTimeout < 0 {
		return fmt.Errorf("idemkit/server/keystatus: Config.StoreTimeout %v: must not be negative", c.StoreTimeout)
	}
	seen := map[string]bool{}
	for _, op := range c.Operations {
		if err := validScopePart(op); err != nil {
			return fmt.Errorf("idemkit/server/keystatus: Config.Operations: operation name %q: %w", op, err)
		}
		if seen[op] {
			return fmt.Errorf("idemkit/server/keystatus: Config.Operations: %q is listed twice", op)
		}
		seen[op] = true
	}
	return nil
}
