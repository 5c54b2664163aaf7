package paymentsapi

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
)

// errAccountRevoked refuses the replay of a revoked account's payment.
var errAccountRevoked = errors.New("paymentsapi: the account is revoked; its stored payments are not replayed")

// authorizeReplay returns the server.Config.AuthorizeReplayFunc of c: it
// refuses the replays of Config.RevokedAccounts. The middleware runs it
// after bearerAccount authenticated the retry, with the retry's own
// request: a real API checks the caller's current permissions here (the
// account still active, the token still holding the payments scope).
func (c *Config) authorizeReplay() func(*http.Request, server.Replay) error {
	if len(c.RevokedAccounts) == 0 {
		return nil
	}
	revoked := slices.Clone(c.RevokedAccounts)
	return func(_ *http.Request, rp server.Replay) error {
		if slices.Contains(revoked, rp.Principal) {
			return errAccountRevoked
		}
		return nil
	}
}

// registerWaiting registers the gauge of requests waiting for their
// in-flight original (idemkit_server_waiting) with the API's metrics.
func (a *App) registerWaiting(mw *server.Middleware) error {
	reg := a.cfg.Metrics
	if reg == nil {
		return nil
	}
	g, err := prommetrics.NewWaitingGauge(mw, &prommetrics.Config{Store: a.backend})
	if err != nil {
		return err
	}
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("paymentsapi: register the waiting gauge: %w", err)
	}
	a.closers = append(a.closers, func() { reg.Unregister(g) })
	return nil
}
