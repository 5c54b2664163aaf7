package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/server"
)

// sqliteInFlight lists live in-progress rows created at or before ?2,
// oldest first.
const sqliteInFlight = `SELECT principal, endpoint, key, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at
FROM idempotency_keys
WHERE state = 'in_progress' AND expires_at > ?1 AND created_at <= ?2
ORDER BY created_at
LIMIT ?3`

// InFlight returns, oldest first, at most limit live records in
// server.StateInProgress created at least olderThan before now: the claims
// an operator looks at when idemkit_store_stuck_claims rises. It reads
// only; the records have no Response.
func (s *Store) InFlight(ctx context.Context, now time.Time, olderThan time.Duration, limit int) ([]server.Record, error) {
	rows, err := s.db.QueryContext(ctx, sqliteInFlight, formatTime(now), formatTime(now.Add(-olderThan)), limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []server.Record
	for rows.Next() {
		var (
			rec              server.Record
			locked           sql.NullString
			created, expires string
		)
		if err := rows.Scan(&rec.Principal, &rec.Endpoint, &rec.Key, &rec.Fingerprint, &rec.FingerprintVersion, &rec.Token,
			&locked, &created, &expires); err != nil {
			return nil, interpretError(err)
		}
		rec.State = server.StateInProgress
		for _, c := range []struct {
			dst *time.Time
			s   string
		}{{&rec.LockedUntil, locked.String}, {&rec.CreatedAt, created}, {&rec.ExpiresAt, expires}} {
			if c.s == "" {
				continue
			}
			t, err := time.Parse(timeLayout, c.s)
			if err != nil {
				return nil, fmt.Errorf("idemkit/server: stored timestamp %q: %w", c.s, err)
			}
			*c.dst = t
		}
		out = append(out, rec)
	}
	return out, interpretError(rows.Err())
}
