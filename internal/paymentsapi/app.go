package paymentsapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/recoverer"
	"github.com/idemkit/idemkit/server/sealstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
	"github.com/idemkit/idemkit/server/sweeper"
)

// App is a wired payments API: idempotency store, ledger, middleware and
// handlers, on one database. Serve [App.Handler] with an http.Server; call
// [App.StopHandlers] before shutting that server down and [App.Close] after.
type App struct {
	cfg      *Config
	handler  http.Handler
	handlers *handlers
	backend  string // "sqlite", "postgres", "mysql" or "redis"

	stop    context.CancelFunc // cancels handlers.stopping
	sweeper *sweeper.Sweeper
	// recoverer finishes payments whose process died (Config.Recover).
	recoverer *recoverer.Recoverer
	// registerStore registers the store's metrics once the sweeper runs;
	// nil without Config.Metrics.
	registerStore func() error
	closers       []func()
	closeOnce     sync.Once
}

// poolMaxConnsDefault is the PostgreSQL pool size unless the DSN sets
// pool_max_conns.
const poolMaxConnsDefault = 32

// Open opens the database (PostgreSQL with cfg.DSN, else the SQLite file
// cfg.DB), creates the idempotency and payments tables if needed and wires
// the API. cfg may be nil. ctx bounds the opening and the migrations only.
func Open(ctx context.Context, cfg *Config) (_ *App, err error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// The middleware hashes its own lines' identifiers (unless
	// LogIdentifiers), so it gets the logger as given.
	mwLogger := cfg.Logger
	if !cfg.LogIdentifiers {
		cfg.Logger = slog.New(redact.Handler(cfg.Logger.Handler(), "key", "principal"))
	}
	a := &App{cfg: cfg}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()

	var store server.Store
	var l ledger
	if isMySQLDSN(cfg.DSN) {
		a.backend = "mysql"
		st, d, closeFunc, err := openMySQL(ctx, cfg.DSN)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, closeFunc)
		store, l = st, ledger{d: d}
	} else if IsRedisDSN(cfg.DSN) {
		if store, l, err = a.openRedis(ctx, cfg); err != nil {
			return nil, err
		}
	} else if cfg.DSN != "" {
		a.backend = "postgres"
		pcfg, err := pgxpool.ParseConfig(cfg.DSN)
		if err != nil {
			return nil, fmt.Errorf("parse --dsn: %w", err)
		}
		if !strings.Contains(cfg.DSN, "pool_max_conns") {
			// In transactional mode every in-flight payment holds a
			// connection for its whole handler (its delay included), so
			// pgxpool's default of max(4, NumCPU) would cap concurrent
			// payments at 4 on a small machine.
			pcfg.MaxConns = poolMaxConnsDefault
		}
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		a.closers = append(a.closers, pool.Close)
		if err := pool.Ping(ctx); err != nil {
			return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		// Waiting duplicates are woken by LISTEN/NOTIFY rather than polling;
		// the notifications cost completions under concurrency, so only
		// then (see pgstore.Config.NotifyChanges).
		st, err := pgstore.New(pool, &pgstore.Config{NotifyChanges: cfg.WaitInFlight > 0})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, st.Close)
		if err := st.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("migrate idempotency store: %w", err)
		}
		store, l = st, ledger{d: pgDialect{pool: pool}}
	} else {
		a.backend = "sqlite"
		db, err := sqlitestore.Open(ctx, cfg.DB)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, func() { _ = db.Close() })
		st, err := sqlitestore.New(db, nil)
		if err != nil {
			return nil, err
		}
		if err := st.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("migrate idempotency store: %w", err)
		}
		store, l = st, ledger{d: sqliteDialect{db: db}}
	}
	if err := l.migrate(ctx); err != nil {
		return nil, err
	}
	if len(cfg.EncryptionKey) > 0 {
		sealed, err := sealstore.New(store, &sealstore.Config{
			Keys:   map[string][]byte{sealstore.KeyID(cfg.EncryptionKey): cfg.EncryptionKey},
			Logger: cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		store = sealed
	}

	stopping, stop := context.WithCancel(context.Background())
	a.stop = stop
	a.handlers = &handlers{
		ledger:            l,
		logger:            cfg.Logger,
		delay:             cfg.Delay,
		delayAfter:        cfg.DelayAfter,
		abortOnDisconnect: cfg.AbortOnDisconnect,
		stopping:          stopping,
		timeNowFunc:       time.Now,
		newIDFunc:         newPaymentID,
		onChargeStart:     cfg.OnChargeStartFunc,
		onChargeMade:      cfg.OnChargeMadeFunc,
	}
	onEvent, err := a.metrics(store, a.handlers.logEvent)
	if err != nil {
		return nil, err
	}
	mw, err := server.New(store, &server.Config{
		PrincipalFunc: bearerAccount,
		Mode:          cfg.serverMode(),
		Window:        cfg.Window,
		LeaseDuration: cfg.LeaseDuration,
		LockTimeout:   cfg.LockTimeout,
		OnEventFunc:   onEvent,
		Logger:        mwLogger,
		// Waiting, replay authorization: see wait.go.
		LogIdentifiers:      cfg.LogIdentifiers,
		WaitInFlight:        cfg.WaitInFlight,
		AuthorizeReplayFunc: cfg.authorizeReplay(),
	})
	if err != nil {
		return nil, err
	}
	if err := a.registerWaiting(mw); err != nil {
		return nil, err
	}
	lookup, err := newLookup(store, cfg)
	if err != nil {
		return nil, err
	}
	a.handler = a.handlers.routes(mw, lookup)
	if cfg.SweepInterval > 0 {
		a.sweeper = sweeper.Start(store, &sweeper.Config{Interval: cfg.SweepInterval, Logger: cfg.Logger})
	}
	if err := a.startRecoverer(store); err != nil {
		return nil, err
	}
	if a.registerStore != nil {
		if err := a.registerStore(); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Handler returns the API: POST /v1/payments (protected by the idempotency
// middleware), GET /v1/payments and GET /v1/idempotency-keys/{key} (the
// key status lookup, LookupPattern).
func (a *App) Handler() http.Handler { return a.handler }

// Backend returns "sqlite", "postgres", "mysql" or "redis".
func (a *App) Backend() string { return a.backend }

// Config returns the configuration the App runs with, defaults filled in.
func (a *App) Config() Config { return *a.cfg }

// Payments returns the account's payments, oldest first (the ledger GET
// /v1/payments shows).
func (a *App) Payments(ctx context.Context, account string) ([]Payment, error) {
	return a.handlers.ledger.list(ctx, account)
}

// StopHandlers makes payment handlers still in their Delay give up with 503
// (nothing is committed, a retry with the same key runs afresh). Call it
// when the server starts shutting down, so that a graceful shutdown does not
// wait out the delays.
func (a *App) StopHandlers() {
	if a.stop != nil {
		a.stop()
	}
}

// Close stops the sweeper and the handlers' delays and closes the database.
// Call it after the HTTP server has shut down. It is safe to call more than
// once.
func (a *App) Close() {
	a.closeOnce.Do(func() {
		a.StopHandlers()
		if a.recoverer != nil {
			_ = a.recoverer.Close()
		}
		if a.sweeper != nil {
			_ = a.sweeper.Close()
		}
		for i := len(a.closers) - 1; i >= 0; i-- {
			a.closers[i]()
		}
		a.closers = nil
	})
}
