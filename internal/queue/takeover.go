package queue

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// Taking over at once the leases of processes that died: a process
// SIGKILLed mid-request leaves its intent leased for up to its lease; a
// process on the same host can see that the holder is gone (the client
// checks, GoneFunc) and need not wait.

const (
	// takeoverOwnersMax bounds the lease holders looked at per pass.
	takeoverOwnersMax = 32
	// takeoverLeasesMax bounds the leases of one dead holder expired per
	// pass (the next pass gets the rest).
	takeoverLeasesMax = 256

	// sqlLeaseOwners lists the holders of live leases on one host, other
	// than this process (on the partial index idemkit_intents_leased: only
	// leased intents are read).
	sqlLeaseOwners = `SELECT DISTINCT lease_owner FROM idemkit_intents
	WHERE state = 'pending' AND lease_owner IS NOT NULL AND lease_owner >= ?1 AND lease_owner < ?2
		AND lease_owner <> ?3 AND leased_until > ?4
	ORDER BY lease_owner LIMIT ?5`

	// sqlLeasesOf lists the live leases of one holder.
	sqlLeasesOf = `SELECT id, key, lease_token FROM idemkit_intents
	WHERE state = 'pending' AND lease_owner = ?1 AND leased_until > ?2
	LIMIT ?3`

	// sqlLeaseOfID is the live lease of one intent, if it has one.
	sqlLeaseOfID = `SELECT lease_owner, key, lease_token FROM idemkit_intents
	WHERE id = ?1 AND state = 'pending' AND lease_owner IS NOT NULL AND leased_until > ?2`

	// sqlExpireLease ends a dead holder's lease now: a compare-and-set on
	// the fencing token and the holder, so a lease claimed meanwhile by
	// anyone else is left alone. The next claim takes a new token.
	sqlExpireLease = `UPDATE idemkit_intents SET next_attempt_at = ?1, updated_at = ?1, lease_owner = NULL, leased_until = NULL
	WHERE id = ?2 AND lease_token = ?3 AND lease_owner = ?4 AND state = 'pending'`
)

// DeadLease is a live lease held by a process that is gone.
type DeadLease struct {
	ID, Key string
	Token   int64
	Owner   Owner
	Raw     string // lease_owner as stored
	Why     string
}

// GoneFunc reports whether the holder of a lease is dead, and why.
type GoneFunc func(o Owner, raw string) (bool, string)

// DeadLeases returns the live leases (leased_until after now) on
// intent id, or on any intent when id is empty, whose holder runs on the
// host of self, is not self, and is gone according to gone (asked once per
// holder).
func (q *Queue) DeadLeases(ctx context.Context, self Owner, id string, now time.Time, gone GoneFunc) ([]DeadLease, error) {
	ts := wire.FormatTime(now)
	me := self.String()
	check := func(raw string) (Owner, string, bool) {
		o, err := ParseOwner(raw)
		if err != nil || raw == me || !o.SameHost(self) {
			return o, "", false
		}
		dead, why := gone(o, raw)
		return o, why, dead
	}
	if id != "" {
		var raw, key string
		var token int64
		err := q.db.QueryRowContext(ctx, sqlLeaseOfID, id, ts).Scan(&raw, &key, &token)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, Interpret(err)
		}
		o, why, dead := check(raw)
		if !dead {
			return nil, nil
		}
		return []DeadLease{{ID: id, Key: key, Token: token, Owner: o, Raw: raw, Why: why}}, nil
	}

	lo, hi := HostPrefixRange(self.Host)
	owners, err := q.strings(ctx, sqlLeaseOwners, lo, hi, me, ts, takeoverOwnersMax)
	if err != nil {
		return nil, err
	}
	var out []DeadLease
	for _, raw := range owners {
		o, why, dead := check(raw)
		if !dead {
			continue
		}
		rows, err := q.db.QueryContext(ctx, sqlLeasesOf, raw, ts, takeoverLeasesMax)
		if err != nil {
			return nil, Interpret(err)
		}
		for rows.Next() {
			l := DeadLease{Owner: o, Raw: raw, Why: why}
			if err := rows.Scan(&l.ID, &l.Key, &l.Token); err != nil {
				rows.Close()
				return nil, Interpret(err)
			}
			out = append(out, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, Interpret(err)
		}
	}
	return out, nil
}

// ExpireLeases ends the given leases now, in one transaction, each with a
// compare-and-set on its token and holder (pending → pending, due now, the
// lease released: the next claim takes it over with a new token); it
// returns those it ended.
func (q *Queue) ExpireLeases(ctx context.Context, now time.Time, leases []DeadLease) ([]DeadLease, error) {
	var done []DeadLease
	err := q.InTx(ctx, func(ex execer) error {
		done = done[:0]
		ts := wire.FormatTime(now)
		for _, l := range leases {
			res, err := ex.ExecContext(ctx, sqlExpireLease, ts, l.ID, l.Token, l.Raw)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				done = append(done, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}

// strings runs a query returning one text column.
func (q *Queue) strings(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, Interpret(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, Interpret(err)
		}
		out = append(out, s)
	}
	return out, Interpret(rows.Err())
}
