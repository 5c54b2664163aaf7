package idemkit

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// Taking over at once the leases of processes that died: a process
// SIGKILLed mid-request leaves its intent leased for up to
// Config.LeaseDuration; another process on the same host can see that the
// holder is gone and need not wait.

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

// deadLease is a live lease held by a process that is gone.
type deadLease struct {
	id, key string
	token   int64
	owner   leaseOwner
	raw     string // lease_owner as stored
	why     string
}

// takeOver expires the live leases that dead processes on this host hold
// (on the intent id, or on any intent when id is empty), so that the next
// claim takes them over at once, with a new fencing token, instead of
// waiting for them to run out. Leases of live processes, of other hosts and
// of this process are never touched; neither are leases whose holder cannot
// be checked (older clients, other OSes): those run out as before. Errors
// are logged, not returned: the leases then simply run out.
func (c *Client) takeOver(ctx context.Context, id string) {
	if !takeoverSupported || c.self.host == "" {
		return
	}
	now := c.now()
	dead, err := c.q.deadLeases(ctx, c.self, id, now, func(o leaseOwner, raw string) (bool, string) {
		gone, why := processGone(o.pid, o.start)
		if !gone {
			c.log.Debug("idemkit: lease holder is alive", "owner", raw, "pid", o.pid)
		}
		return gone, why
	})
	if err == nil && len(dead) > 0 {
		dead, err = c.q.expireLeases(ctx, now, dead)
	}
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("idemkit: looking for leases of dead processes failed", "error", err)
		}
		return
	}
	for _, l := range dead {
		c.log.Info("idemkit: taking over intent of dead process pid "+strconv.Itoa(l.owner.pid),
			"intent", logID(l.id, l.key), "pid", l.owner.pid, "owner", l.raw, "token", l.token, "reason", l.why)
	}
	if len(dead) > 0 {
		c.poke()
	}
}

// goneFunc reports whether the holder of a lease is dead, and why.
type goneFunc func(o leaseOwner, raw string) (bool, string)

// deadLeases returns the live leases (leased_until after now) on
// intent id, or on any intent when id is empty, whose holder runs on the
// host of self, is not self, and is gone according to gone (asked once per
// holder).
func (q *queue) deadLeases(ctx context.Context, self leaseOwner, id string, now time.Time, gone goneFunc) ([]deadLease, error) {
	ts := wire.FormatTime(now)
	me := self.String()
	check := func(raw string) (leaseOwner, string, bool) {
		o, err := parseLeaseOwner(raw)
		if err != nil || raw == me || !o.sameHost(self) {
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
			return nil, interpretError(err)
		}
		o, why, dead := check(raw)
		if !dead {
			return nil, nil
		}
		return []deadLease{{id: id, key: key, token: token, owner: o, raw: raw, why: why}}, nil
	}

	lo, hi := hostPrefixRange(self.host)
	owners, err := q.strings(ctx, sqlLeaseOwners, lo, hi, me, ts, takeoverOwnersMax)
	if err != nil {
		return nil, err
	}
	var out []deadLease
	for _, raw := range owners {
		o, why, dead := check(raw)
		if !dead {
			continue
		}
		rows, err := q.db.QueryContext(ctx, sqlLeasesOf, raw, ts, takeoverLeasesMax)
		if err != nil {
			return nil, interpretError(err)
		}
		for rows.Next() {
			l := deadLease{owner: o, raw: raw, why: why}
			if err := rows.Scan(&l.id, &l.key, &l.token); err != nil {
				rows.Close()
				return nil, interpretError(err)
			}
			out = append(out, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, interpretError(err)
		}
	}
	return out, nil
}

// expireLeases ends the given leases now, in one transaction, each with a
// compare-and-set on its token and holder; it returns those it ended.
func (q *queue) expireLeases(ctx context.Context, now time.Time, leases []deadLease) ([]deadLease, error) {
	var done []deadLease
	err := q.inTx(ctx, func(ex execer) error {
		done = done[:0]
		ts := wire.FormatTime(now)
		for _, l := range leases {
			res, err := ex.ExecContext(ctx, sqlExpireLease, ts, l.id, l.token, l.raw)
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
func (q *queue) strings(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, s)
	}
	return out, interpretError(rows.Err())
}

// logID names an intent in logs at INFO and above without its key in
// clear: its id, or, when the id is the key (minted), "…" and its last 8
// characters (the short id the CLI prints).
func logID(id, key string) string {
	if id != key {
		return id
	}
	return "…" + id[max(0, len(id)-8):]
}
