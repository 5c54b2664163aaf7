package paymentsapi

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/redisstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// IsRedisDSN reports whether dsn names a Redis (redis://host:port/n or
// rediss://…): the idempotency records then live in Redis, in lease mode,
// and the ledger stays in the SQLite file Config.DB.
func IsRedisDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "redis://") || strings.HasPrefix(dsn, "rediss://")
}

// DefaultMode returns the mode used for dsn when none is given: lease for
// Redis, which cannot share a transaction with the ledger, else ModeDefault.
func DefaultMode(dsn string) Mode {
	if IsRedisDSN(dsn) {
		return ModeLease
	}
	return ModeDefault
}

// openRedis opens the idempotency store in the Redis of cfg.DSN and the
// ledger in the SQLite file cfg.DB. redisstore.New refuses a Redis whose
// maxmemory-policy is not noeviction.
func (a *App) openRedis(ctx context.Context, cfg *Config) (server.Store, ledger, error) {
	a.backend = "redis"
	opts, err := redis.ParseURL(cfg.DSN)
	if err != nil {
		return nil, ledger{}, fmt.Errorf("parse --dsn: %w", err)
	}
	// Calls end with their context (the middleware's StoreTimeout), not
	// only with the client's read timeout.
	opts.ContextTimeoutEnabled = true
	client := redis.NewClient(opts)
	a.closers = append(a.closers, func() { _ = client.Close() })
	if err := client.Ping(ctx).Err(); err != nil {
		return nil, ledger{}, fmt.Errorf("connect to Redis: %w", err)
	}
	store, err := redisstore.New(client, nil)
	if err != nil {
		return nil, ledger{}, err
	}
	db, err := sqlitestore.Open(ctx, cfg.DB)
	if err != nil {
		return nil, ledger{}, err
	}
	a.closers = append(a.closers, func() { _ = db.Close() })
	return store, ledger{d: sqliteDialect{db: db}}, nil
}
