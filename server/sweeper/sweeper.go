// Package sweeper deletes expired idempotency records in the background,
// from any server.Store:
//
//	sw := sweeper.Start(store, nil) // once at once, then every minute
//	defer sw.Close()
package sweeper

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit/server"
)

// intervalDefault is the default time between two sweeps.
const intervalDefault = time.Minute

// graceDefault is the default Config.Grace.
const graceDefault = time.Minute

// Config configures a Sweeper. The zero value is valid.
type Config struct {
	// Interval is the time between two sweeps. Defaults to 1m.
	Interval time.Duration
	// Grace is how long after its expiry a record is kept: a sweep deletes
	// only records that expired at least Grace ago. A request that read the
	// clock just before its key expired (a replay of a live record) must
	// not find the record deleted under it by the time its claim runs, or
	// the claim would insert a fresh record and run the handler again.
	// Every Store keeps server.SweepGrace (1m) itself; a longer Grace keeps
	// records longer, a shorter one changes nothing. Defaults to 1m.
	Grace time.Duration
	// Logger receives a debug line per sweep that deleted rows and a warning
	// per failed sweep. Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	out.Interval = cmp.Or(out.Interval, intervalDefault)
	out.Grace = cmp.Or(out.Grace, graceDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// Sweeper runs Store.Sweep in the background: once when it starts, then every
// Interval. Stop it with Close.
type Sweeper struct {
	store       server.Store
	cfg         *Config
	timeNowFunc func() time.Time

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	stats     stats
}

// Start starts a goroutine that deletes expired records from store,
// once at once and then every cfg.Interval, until Close. cfg may be nil; a
// negative Interval means the default.
func Start(store server.Store, cfg *Config) *Sweeper {
	return start(store, cfg, time.Now)
}

// start is Start with an injected clock, for tests.
func start(store server.Store, cfg *Config, now func() time.Time) *Sweeper {
	cfg = cfg.WithDefaults()
	if cfg.Interval < 0 {
		cfg.Interval = intervalDefault
	}
	if cfg.Grace < 0 {
		cfg.Grace = graceDefault
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sweeper{store: store, cfg: cfg, timeNowFunc: now, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s
}

func (s *Sweeper) run(ctx context.Context) {
	defer close(s.done)
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		s.sweepOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (s *Sweeper) sweepOnce(ctx context.Context) {
	// The store keeps server.SweepGrace itself; only the rest of a longer
	// Grace is taken off the time passed.
	start := s.timeNowFunc()
	n, err := s.store.Sweep(ctx, start.Add(-max(s.cfg.Grace-server.SweepGrace, 0)))
	end := s.timeNowFunc()
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Closed mid-sweep: not a failure.
		return
	case err != nil:
		s.cfg.Logger.WarnContext(ctx, "idemkit: sweep of expired idempotency records failed", "deleted", n, "error", err)
	case n > 0:
		s.cfg.Logger.DebugContext(ctx, "idemkit: swept expired idempotency records", "deleted", n)
	}
	s.stats.record(n, err != nil, end, end.Sub(start))
}

// Close stops the sweeper, canceling a sweep in progress, and waits for its
// goroutine to exit. It is safe to call more than once; it always returns
// nil.
func (s *Sweeper) Close() error {
	s.closeOnce.Do(s.cancel)
	<-s.done
	return nil
}
