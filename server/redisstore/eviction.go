package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// forEachMaster calls fn with a client of every master: each master of a
// cluster (or each shard of a ring), or the client itself.
func (s *Store) forEachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client, addr string) error) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m, m.Options().Addr) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m, m.Options().Addr) })
	case *redis.Client:
		return fn(ctx, c, "")
	default:
		return fmt.Errorf("idemkit/server/redisstore: unsupported client type %T", s.client)
	}
}

// infoField returns field of the INFO section of c.
func infoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", interpretError(err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("idemkit/server/redisstore: INFO %s has no %s", section, field)
}

// checkEvictionPolicy returns an *EvictionPolicyError for the first master
// whose maxmemory-policy is not noeviction. It reads INFO memory rather
// than CONFIG GET, which managed services often disable.
func (s *Store) checkEvictionPolicy(ctx context.Context) error {
	return s.forEachMaster(ctx, func(ctx context.Context, c *redis.Client, addr string) error {
		policy, err := infoField(ctx, c, "memory", "maxmemory_policy")
		if err != nil {
			return fmt.Errorf("idemkit/server/redisstore: reading maxmemory-policy: %w", err)
		}
		if policy != "noeviction" {
			return &EvictionPolicyError{Addr: addr, Policy: policy}
		}
		return nil
	})
}

// Evictions returns the number of keys the server has evicted since it
// started (INFO stats evicted_keys), summed over every master of a
// cluster. Any increase means records, possibly of this store, were
// deleted before their window ended, and so keys that stopped
// deduplicating: alert on its rate. It counts every key of the server,
// not only this store's.
func (s *Store) Evictions(ctx context.Context) (int64, error) {
	var (
		mu    sync.Mutex
		total int64
	)
	err := s.forEachMaster(ctx, func(ctx context.Context, c *redis.Client, _ string) error {
		v, err := infoField(ctx, c, "stats", "evicted_keys")
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("idemkit/server/redisstore: evicted_keys %q: %w", v, err)
		}
		mu.Lock()
		total += n
		mu.Unlock()
		return nil
	})
	return total, err
}
