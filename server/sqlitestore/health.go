package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/server"
)

// sqliteHealth reads what server.StoreHealth adds to the counts of
// sqliteStats: stuck claims (through the in-progress index), the oldest
// expiry (the expiry index) and the sizes from the dbstat table.
const sqliteHealth = `SELECT
    (SELECT count(*) FROM idempotency_keys
        WHERE state = 'in_progress' AND locked_until <= ?1 AND expires_at > ?1),
    (SELECT min(expires_at) FROM idempotency_keys),
    (SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'idempotency_keys'),
    (SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN
        (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'idempotency_keys'))`

// health reads the server.StoreHealth of Stats.
func (s *Store) health(ctx context.Context, now time.Time) (server.StoreHealth, error) {
	var (
		h      server.StoreHealth
		oldest sql.NullString
	)
	if err := s.db.QueryRowContext(ctx, sqliteHealth, formatTime(now)).Scan(&h.Stuck, &oldest, &h.TableBytes, &h.IndexBytes); err != nil {
		return server.StoreHealth{}, interpretError(err)
	}
	if oldest.Valid {
		t, err := time.Parse(timeLayout, oldest.String)
		if err != nil {
			return server.StoreHealth{}, fmt.Errorf("idemkit/server: stored timestamp %q: %w", oldest.String, err)
		}
		h.OldestExpiresAt = t
	}
	return h, nil
}

// PoolStats returns the saturation of the store's *sql.DB (see
// server.PoolStats), from its sql.DBStats.
func (s *Store) PoolStats() server.PoolStats {
	st := s.db.Stats()
	return server.PoolStats{
		MaxConns:     int64(st.MaxOpenConnections),
		InUse:        int64(st.InUse),
		Idle:         int64(st.Idle),
		Waits:        st.WaitCount,
		WaitDuration: st.WaitDuration,
	}
}
