package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/server"
)

// pgHealth reads what server.StoreHealth adds to the counts of pgStats:
// stuck claims, the oldest expiry and the sizes, partitions summed
// (pg_partition_tree lists nothing for a plain table, hence the UNION).
const pgHealth = `SELECT
    (SELECT count(*) FROM idempotency_keys
        WHERE state = 'in_progress' AND expires_at > $1 AND locked_until <= $1),
    (SELECT min(expires_at) FROM idempotency_keys),
    coalesce(sum(pg_table_size(t.relid)), 0),
    coalesce(sum(pg_indexes_size(t.relid)), 0)
FROM (SELECT relid FROM pg_partition_tree('idempotency_keys'::regclass)
      UNION SELECT 'idempotency_keys'::regclass) t`

// health reads the server.StoreHealth of Stats, by the caller's now (it
// is a report, not a decision).
func (s *Store) health(ctx context.Context, now time.Time) (server.StoreHealth, error) {
	var (
		h      server.StoreHealth
		oldest *time.Time
	)
	if err := s.pool.QueryRow(ctx, pgHealth, pgTime(now)).Scan(&h.Stuck, &oldest, &h.TableBytes, &h.IndexBytes); err != nil {
		return server.StoreHealth{}, interpretError(err)
	}
	if oldest != nil {
		h.OldestExpiresAt = oldest.UTC()
	}
	return h, nil
}

// PoolStats returns the saturation of the store's pool (see
// server.PoolStats): Waits is pgxpool's EmptyAcquireCount and WaitDuration
// its EmptyAcquireWaitTime.
func (s *Store) PoolStats() server.PoolStats {
	st := s.pool.Stat()
	return server.PoolStats{
		MaxConns:     int64(st.MaxConns()),
		InUse:        int64(st.AcquiredConns()),
		Idle:         int64(st.IdleConns()),
		Waits:        st.EmptyAcquireCount(),
		WaitDuration: st.EmptyAcquireWaitTime(),
		Canceled:     st.CanceledAcquireCount(),
	}
}
