package paymentsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
	"github.com/idemkit/idemkit/server/recoverer"
)

// recoverIntervalDefault is the default Config.RecoverInterval.
const recoverIntervalDefault = 30 * time.Second

// validateRecover returns what is wrong with the recoverer's settings.
func (c *Config) validateRecover() []error {
	var errs []error
	if c.RecoverInterval < 0 {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.RecoverInterval must not be negative, got %v", c.RecoverInterval))
	}
	if c.RecoverMinAge < 0 {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.RecoverMinAge must not be negative, got %v", c.RecoverMinAge))
	}
	if c.Recover && c.Mode != ModeLease {
		errs = append(errs, fmt.Errorf("paymentsapi: Config.Recover needs Config.Mode %q (a transactional payment commits with its response, or not at all), got %q", ModeLease, c.Mode))
	}
	return errs
}

// paymentResponse is the 201 a create handler sends for p: the response
// the recoverer reconstructs from the ledger is this one too, so that a
// recovered payment replays byte for byte what its handler would have
// sent.
func paymentResponse(p Payment) *server.StoredResponse {
	var body bytes.Buffer
	_ = json.NewEncoder(&body).Encode(p) // a Payment always encodes
	return &server.StoredResponse{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   body.Bytes(),
	}
}

// writeStored writes resp.
func writeStored(w http.ResponseWriter, resp *server.StoredResponse) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recoverPayment is the recoverer's RecoverFunc. The ledger plays the
// payment processor: a payment row under the claim's account and key is
// the charge made under its downstream key. If it exists, the payment was
// made and the claim completes with the 201 its handler would have sent;
// if not, it was never made and the claim is released, so that the
// client's retry makes it.
func (a *App) recoverPayment(ctx context.Context, c recoverer.Claim) (*server.StoredResponse, error) {
	p, err := a.handlers.ledger.scanPayment(a.handlers.ledger.d.queryRow(ctx, a.handlers.ledger.d.bind(sqlSelectPaymentByKey),
		c.Scope.Principal, c.Scope.Key))
	switch {
	case errors.Is(err, errNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("payments: read payment by key: %w", err)
	}
	return paymentResponse(p), nil
}

// startRecoverer starts the recoverer when Config.Recover is set, and
// registers its metrics with Config.Metrics. A store that cannot list its
// claims (Redis) fails with recoverer.ErrNoListing.
func (a *App) startRecoverer(store server.Store) error {
	if !a.cfg.Recover {
		return nil
	}
	r, err := recoverer.Start(store, a.recoverPayment, &recoverer.Config{
		Interval: a.cfg.RecoverInterval,
		MinAge:   a.cfg.RecoverMinAge,
		Lease:    a.cfg.LeaseDuration,
		Logger:   a.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("paymentsapi: --recover: %w", err)
	}
	a.recoverer = r
	if reg := a.cfg.Metrics; reg != nil {
		c, err := prommetrics.NewRecovererCollector(r, &prommetrics.RecovererCollectorConfig{Store: a.backend})
		if err != nil {
			return err
		}
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("paymentsapi: register recoverer metrics: %w", err)
		}
		a.closers = append(a.closers, func() { reg.Unregister(c) })
	}
	return nil
}
