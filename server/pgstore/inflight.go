package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/server"
)

// pgInFlight lists live in-progress rows created at or before $2, oldest
// first.
const pgInFlight = `SELECT principal, endpoint, key, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at
FROM idempotency_keys
WHERE state = 'in_progress' AND expires_at > $1 AND created_at <= $2
ORDER BY created_at
LIMIT $3`

// InFlight returns, oldest first, at most limit live records in
// server.StateInProgress created at least olderThan before now: the claims
// an operator looks at when idemkit_store_stuck_claims rises. It reads
// only; the records have no Response. It decides by the caller's now (it
// is a report, not a decision).
func (s *Store) InFlight(ctx context.Context, now time.Time, olderThan time.Duration, limit int) ([]server.Record, error) {
	rows, err := s.pool.Query(ctx, pgInFlight, pgTime(now), pgTime(now.Add(-olderThan)), limit)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []server.Record
	for rows.Next() {
		var (
			rec    server.Record
			locked *time.Time
		)
		if err := rows.Scan(&rec.Principal, &rec.Endpoint, &rec.Key, &rec.Fingerprint, &rec.FingerprintVersion, &rec.Token,
			&locked, &rec.CreatedAt, &rec.ExpiresAt); err != nil {
			return nil, interpretError(err)
		}
		rec.State = server.StateInProgress
		if locked != nil {
			rec.LockedUntil = locked.UTC()
		}
		rec.CreatedAt, rec.ExpiresAt = rec.CreatedAt.UTC(), rec.ExpiresAt.UTC()
		out = append(out, rec)
	}
	return out, interpretError(rows.Err())
}
