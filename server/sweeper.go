package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// SweeperIntervalDefault is the default time between two sweeps.
const SweeperIntervalDefault = time.Minute

// SweeperGraceDefault is the default SweeperConfig.Grace.
const SweeperGraceDefault = time.Minute

// SweeperConfig configures a Sweeper. The zero value is valid.
type SweeperConfig struct {
	// Interval is the time between two sweeps. Defaults to
	// SweeperIntervalDefault (1m).
	Interval time.Duration
	// Grace is how long after its expiry a record is kept: a sweep deletes
	// only records that expired at least Grace ago. A request that read the
	// clock just before its key expired (a replay of a live record) must
	// not find the record deleted under it by the time its claim runs, or
	// the claim would insert a fresh record and run the handler again.
	// Defaults to SweeperGraceDefault (1m).
	Grace time.Duration
	// Logger receives a debug line per sweep that deleted rows and a warning
	// per failed sweep. Defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *SweeperConfig) WithDefaults() *SweeperConfig {
	var out SweeperConfig
	if c != nil {
		out = *c
	}
	out.Interval = cmp.Or(out.Interval, SweeperIntervalDefault)
	out.Grace = cmp.Or(out.Grace, SweeperGraceDefault)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// Sweeper runs Store.Sweep in the background: once when it starts, then every
// Interval. Stop it with Close.
type Sweeper struct {
	store       Store
	cfg         *SweeperConfig
	timeNowFunc func() time.Time

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// StartSweeper starts a goroutine that deletes expired records from store,
// once at once and then every cfg.Interval, until Close. cfg may be nil; a
// negative Interval means the default.
func StartSweeper(store Store, cfg *SweeperConfig) *Sweeper {
	return startSweeper(store, cfg, time.Now)
}

// startSweeper is StartSweeper with an injected clock, for tests.
func startSweeper(store Store, cfg *SweeperConfig, now func() time.Time) *Sweeper {
	cfg = cfg.WithDefaults()
	if cfg.Interval < 0 {
		cfg.Interval = SweeperIntervalDefault
	}
	if cfg.Grace < 0 {
		cfg.Grace = SweeperGraceDefault
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
	n, err := s.store.Sweep(ctx, s.timeNowFunc().Add(-s.cfg.Grace))
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Closed mid-sweep: not a failure.
	case err != nil:
		s.cfg.Logger.WarnContext(ctx, "idemkit: sweep of expired idempotency records failed", "deleted", n, "error", err)
	case n > 0:
		s.cfg.Logger.DebugContext(ctx, "idemkit: swept expired idempotency records", "deleted", n)
	}
}

// Close stops the sweeper, canceling a sweep in progress, and waits for its
// goroutine to exit. It is safe to call more than once; it always returns
// nil.
func (s *Sweeper) Close() error {
	s.closeOnce.Do(s.cancel)
	<-s.done
	return nil
}

// StoreStats describes the size of a store, for the metrics an operator
// watches: the row count should stay roughly flat at request rate times the
// retention window, the sweep backlog near zero, and the oldest live record
// no older than the window.
type StoreStats struct {
	// Rows is the number of rows, including expired rows the sweeper has not
	// deleted yet.
	Rows int64
	// Expired is the number of rows whose ExpiresAt is not after now: the
	// sweep backlog.
	Expired int64
	// InProgress is the number of live rows in StateInProgress.
	InProgress int64
	// OldestCreatedAt is the CreatedAt of the oldest live row; zero when
	// there is none.
	OldestCreatedAt time.Time
}
