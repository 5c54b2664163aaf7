package paymentsapi

import (
	"fmt"
	"net/http"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/prommetrics"
)

// metrics registers the middleware's metrics and the store's collector on
// a.cfg.Metrics, labelled with the backend, and returns the OnEventFunc that
// logs each request and counts it. Without a Registerer it returns log.
func (a *App) metrics(store server.Store, log func(*http.Request, server.Event)) (func(*http.Request, server.Event), error) {
	reg := a.cfg.Metrics
	if reg == nil {
		return log, nil
	}
	m, err := prommetrics.NewWithConfig(reg, &prommetrics.Config{Store: a.backend})
	if err != nil {
		return nil, err
	}
	a.registerStore = func() error {
		stats, ok := store.(prommetrics.StatsReader)
		if !ok {
			return nil
		}
		c, err := prommetrics.NewStoreCollector(stats, &prommetrics.StoreCollectorConfig{
			Store: a.backend, Sweeper: a.sweeper, Window: a.cfg.Window,
		})
		if err != nil {
			return err
		}
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("paymentsapi: register store metrics: %w", err)
		}
		a.closers = append(a.closers, func() { reg.Unregister(c) })
		return nil
	}
	return func(r *http.Request, e server.Event) {
		log(r, e)
		m.Observe(r, e)
	}, nil
}
