package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/server"
)

// myInFlight lists live in-progress rows created at or before the second
// argument, oldest first. The in-flight rows are one range of the index
// on (state, locked_until); sorting them by created_at reads that range
// only.
const myInFlight = "SELECT principal, endpoint, `key`, fingerprint, fingerprint_version, token,\n" +
	"    DATE_FORMAT(locked_until, " + timeFormat + "), DATE_FORMAT(created_at, " + timeFormat + "), DATE_FORMAT(expires_at, " + timeFormat + ")\n" +
	"FROM idempotency_keys\n" +
	"WHERE state = 'in_progress' AND expires_at > ? AND created_at <= ?\n" +
	"ORDER BY created_at\n" +
	"LIMIT ?"

// InFlight returns, oldest first, at most limit live records in
// server.StateInProgress created at least olderThan before now: the claims
// an operator looks at when idemkit_store_stuck_claims rises, and those
// package server/recoverer recovers. It reads only; the records have no
// Response. It decides by the caller's now (it is a report, not a
// decision: a takeover decides by the database's clock).
func (s *Store) InFlight(ctx context.Context, now time.Time, olderThan time.Duration, limit int) ([]server.Record, error) {
	rows, err := s.db.QueryContext(ctx, myInFlight, formatTime(now), formatTime(now.Add(-olderThan)), limit)
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
			t, err := time.ParseInLocation(timeLayout, c.s, time.UTC)
			if err != nil {
				return nil, fmt.Errorf("idemkit/server: stored timestamp %q: %w", c.s, err)
			}
			*c.dst = t
		}
		out = append(out, rec)
	}
	return out, interpretError(rows.Err())
}
