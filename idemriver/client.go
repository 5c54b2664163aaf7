package idemriver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Client submits intents as River jobs and, once started, works them. It is
// safe for concurrent use; many Clients, in many processes, share one queue.
type Client struct {
	pool  *pgxpool.Pool
	river *river.Client[pgx.Tx]
	cfg   *Config
	httpc *http.Client
	// tables are the schema-qualified names of the tables read here.
	jobTable, hostTable string
	// defaultProfile and profiles are Config.Profile and Config.Profiles
	// with their defaults filled in.
	defaultProfile *Profile
	profiles       map[string]*Profile
	windows        windowCache

	mu      sync.Mutex
	stop    context.CancelFunc
	stopped chan struct{}
}

// NewClient returns a Client on pool, whose database Migrate has migrated.
// cfg may be nil. It does not start workers: Start does.
func NewClient(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{pool: pool, cfg: cfg, jobTable: qualify(cfg.Schema, "river_job"), hostTable: qualify(cfg.Schema, hostTableName)}
	if err := c.buildProfiles(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.httpc = newHTTPClient(cfg)
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{c: c})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{cfg.Queue: {MaxWorkers: cfg.MaxWorkers}},
		Workers:              workers,
		Schema:               cfg.Schema,
		FetchPollInterval:    cfg.FetchPollInterval,
		FetchCooldown:        min(cfg.FetchPollInterval, river.FetchCooldownDefault),
		PollOnly:             cfg.PollOnly,
		JobTimeout:           cfg.jobTimeout(),
		RescueStuckJobsAfter: cfg.LeaseDuration,
		MaxAttempts:          jobMaxAttempts,
		// Discarded jobs keep River's own default (7 days).
		CompletedJobRetentionPeriod: cfg.JobRetentionPeriod,
		CancelledJobRetentionPeriod: cfg.JobRetentionPeriod,
		Logger:                      cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("idemriver: river client: %w", err)
	}
	c.river = rc
	return c, nil
}

// River returns the River client underneath, to insert or manage other jobs
// with, or to subscribe to its events.
func (c *Client) River() *river.Client[pgx.Tx] { return c.river }

// Start starts the workers of this Client (Config.MaxWorkers of them) and
// its rescuer of jobs whose worker died (see Takeover in the package doc).
// They run until Stop, or until ctx ends (then attempts in flight are
// canceled and their intents are due again at once).
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop != nil {
		return errors.New("idemriver: client already started")
	}
	if err := c.river.Start(ctx); err != nil {
		return fmt.Errorf("idemriver: start river: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	c.stop, c.stopped = cancel, make(chan struct{})
	go c.rescueLoop(rctx, c.stopped)
	return nil
}

// Stop stops the workers: no new attempt starts, and those in flight are
// canceled (their intents are due again at once, to be sent by any Client
// with the same key). It returns once they have stopped, or ctx's error.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	stop, stopped := c.stop, c.stopped
	c.stop = nil
	c.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	err := c.river.StopAndCancel(ctx)
	select {
	case <-stopped:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.httpc.CloseIdleConnections()
	return err
}

// newHTTPClient is Config.HTTPClient, or a client of its own, with
// redirects not followed unless it says otherwise.
func newHTTPClient(cfg *Config) *http.Client {
	var hc http.Client
	if cfg.HTTPClient != nil {
		hc = *cfg.HTTPClient
	} else {
		hc.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if hc.CheckRedirect == nil {
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	if hc.Timeout == 0 || hc.Timeout > cfg.AttemptTimeout {
		hc.Timeout = cfg.AttemptTimeout
	}
	return &hc
}

// qualify returns the table name, schema-qualified when schema is set.
func qualify(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// rescueInterval is how often a started Client looks for jobs whose worker
// died.
func (c *Client) rescueInterval() time.Duration {
	return min(max(c.cfg.LeaseDuration/4, 100*time.Millisecond), 15*time.Second)
}
