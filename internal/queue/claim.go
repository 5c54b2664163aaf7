package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/wire"
)

// Claimed is an intent this process now holds the lease of, with an attempt
// started (unless expired is set: the horizon had passed and the intent was
// marked expired instead).
type Claimed struct {
	Lease
	Intent  *Intent
	Attempt int
	Expired bool
	// Horizon is the intent's effective window and horizon, as planned at
	// the claim.
	Horizon policy.Horizon
	// Budget is the intent's attempt budget, counting the attempt started.
	Budget policy.Budget
}

// Lease names one claim of an intent: the intent and the fencing token
// the claim took. Every write under the claim checks the token.
type Lease struct {
	ID    string
	Token int64
}

// Claim takes the lease of the due intent with the given id, or of the
// earliest due intent of this instance when id is empty (passing over the
// ids in skip), and starts its attempt, in one transaction: pending →
// pending, leased until now+leaseFor by this process, a new fencing token,
// attempts+1, the attempt logged as started, the horizon planned (only
// ever earlier) and how the key travels fixed. An intent whose horizon
// passed is expired instead (pending → expired, Claimed.Expired); one
// whose attempt budget is spent is held (its due time moved, nothing
// claimed); a row that cannot be decoded is quarantined for an hour (a
// Corrupt Error). It returns nil, nil when nothing is due.
func (q *Queue) Claim(ctx context.Context, id string, now time.Time, leaseFor time.Duration, skip []string) (*Claimed, error) {
	return q.claimTx(ctx, id, nil, now, leaseFor, skip)
}

// InsertClaim inserts an intent (→ pending) and claims it (see Claim) in
// the same transaction (one fsync, not two: Do). If the key was already
// queued with the same request, it claims that intent if it is due; it
// returns the intent either way.
func (q *Queue) InsertClaim(ctx context.Context, n *NewIntent, leaseFor time.Duration) (*Intent, *Claimed, error) {
	var in *Intent
	cl, err := q.claimTx(ctx, "", func(ex execer) (string, error) {
		var err error
		in, err = insertOne(ctx, ex, n, q.self)
		if err != nil {
			return "", err
		}
		return in.ID, nil
	}, n.Now, leaseFor, nil)
	if Is(err, Foreign) {
		return in, nil, err // committed: the intent is queued, elsewhere's
	}
	if err != nil {
		return nil, nil, err
	}
	return in, cl, nil
}

// claimTx is claim; insert, if not nil, runs first in the same transaction
// and returns the id to claim.
func (q *Queue) claimTx(ctx context.Context, id string, insert func(ex execer) (string, error), now time.Time, leaseFor time.Duration, skip []string) (*Claimed, error) {
	var out *Claimed
	var decodeErr error
	var gen int64 // the generation a first attempt took
	var budget policy.Budget
	err := q.InTx(ctx, func(ex execer) error {
		gen = 0
		if insert != nil {
			var err error
			if id, err = insert(ex); err != nil {
				return err
			}
		}
		var r *row
		for tries := 0; ; tries++ {
			var sr *sql.Row
			if id == "" {
				sr = ex.QueryRowContext(ctx, sqlSelectDue, wire.FormatTime(now), q.origin, q.self, skipJSON(skip))
			} else {
				sr = ex.QueryRowContext(ctx, sqlSelectDueID, id, wire.FormatTime(now))
			}
			var err error
			r, err = scanRow(sr)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			// The attempt budget, checked when the attempt would start: a
			// process that dies mid-attempt, over and over, never gets to
			// check it after an answer.
			held, err := q.overBudget(ctx, ex, r, now, &budget)
			if err != nil {
				return err
			}
			if !held {
				break
			}
			if id != "" || tries >= 16 {
				return nil // held: not due now
			}
		}
		in, err := decodeIntent(r)
		if err == nil {
			if ferr := q.Foreign(in); ferr != nil {
				decodeErr = ferr // not claimed: queued at another instance
				return nil
			}
		}
		if err != nil {
			// Quarantine the row for an hour so the worker moves on.
			decodeErr = err
			_, qerr := ex.ExecContext(ctx, sqlQuarantine, wire.FormatTime(now.Add(time.Hour)), r.id)
			return qerr
		}
		var winSec int64
		if err := ex.QueryRowContext(ctx, sqlHostWindow, r.host).Scan(&winSec); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		prof := q.cfg.Hosts.For(in.URL)
		w := q.cfg.Window
		if prof.Window > 0 {
			w = prof.Window
		}
		hz := policy.NewHorizon(now, in.FirstAttemptAt, w, time.Duration(winSec)*time.Second, q.cfg.Safety, in.Horizon)
		horizon := hz.At
		ts := wire.FormatTime(now)
		if now.After(horizon) {
			// Never attempted past the horizon: expire under the current
			// token (we hold the write lock, and the row is due).
			msg := "horizon " + wire.FormatTime(horizon) + " passed without a definitive answer"
			if in.LastError != "" {
				msg += "; last error: " + in.LastError
			}
			if _, err := ex.ExecContext(ctx, sqlFinish, string(Expired), nil, nil, nil, nil, msg, ts, in.ID, r.leaseToken, 0); err != nil {
				return err
			}
			in.State, in.LastError, in.UpdatedAt = Expired, msg, now.Truncate(time.Millisecond)
			out = &Claimed{Lease: Lease{in.ID, r.leaseToken}, Intent: in, Expired: true, Horizon: hz}
			return nil
		}
		var first, stored string
		c := &Claimed{Lease: Lease{ID: in.ID}, Intent: in, Horizon: hz, Budget: budget}
		form := policy.KeyForm(prof, in.Attempts > 0)
		if err := ex.QueryRowContext(ctx, sqlClaim, ts, wire.FormatTime(horizon), wire.FormatTime(now.Add(leaseFor)), in.ID, q.cfg.Owner, form).
			Scan(&c.Token, &c.Attempt, &first, &stored, &in.KeyForm); err != nil {
			return err
		}
		if _, err := ex.ExecContext(ctx, sqlInsertAttempt, in.ID, c.Attempt, c.Token, ts); err != nil {
			return err
		}
		if in.FirstAttemptAt.IsZero() {
			if gen, err = bumpGeneration(ctx, ex); err != nil {
				return err
			}
		}
		in.Attempts = c.Attempt
		in.FirstAttemptAt, _ = wire.ParseTime(first)
		in.Horizon, _ = wire.ParseTime(stored)
		c.Horizon.At = in.Horizon
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	if gen > 0 {
		q.noteGeneration(gen) // before the first byte is sent
	}
	if decodeErr != nil {
		return nil, decodeErr
	}
	return out, nil
}

// overBudget holds the intent of row r, due at now, when Config.MaxAttemptsPerHour
// attempts of it started within the last hour: it is made due when the
// oldest of them is an hour old, and its last error says why it waits.
// Otherwise it sets *b to the budget of the attempt about to start (its
// Oldest counting that attempt), read in the same statement.
func (q *Queue) overBudget(ctx context.Context, ex execer, r *row, now time.Time, b *policy.Budget) (bool, error) {
	*b = policy.Budget{Max: q.cfg.PerHour}
	if q.cfg.PerHour <= 0 {
		return false, nil
	}
	// The perHour-th and (perHour-1)-th most recent attempts: the first is
	// the budget's check, the second its Oldest once this attempt starts.
	offset := max(q.cfg.PerHour-2, 0)
	rows, err := ex.QueryContext(ctx, sqlLastAttempts, r.id, offset)
	if err != nil {
		return false, err
	}
	var times []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return false, err
		}
		times = append(times, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return false, err
	}
	var check string
	switch {
	case q.cfg.PerHour == 1:
		b.Oldest = now // this attempt itself
		if len(times) > 0 {
			check = times[0]
		}
	default:
		if len(times) > 0 {
			b.Oldest, _ = wire.ParseTime(times[0])
		}
		if len(times) > 1 {
			check = times[1]
		}
	}
	if check == "" {
		return false, nil
	}
	oldest, err := wire.ParseTime(check)
	if err != nil || !oldest.Add(time.Hour).After(now) {
		return false, nil // a damaged time is left to decodeIntent's checks
	}
	due := oldest.Add(time.Hour)
	msg := fmt.Sprintf("waiting until %s: %d attempts started in the last hour (Config.MaxAttemptsPerHour)", wire.FormatTime(due), q.cfg.PerHour)
	before := r.lastError
	if strings.HasPrefix(before, "waiting until ") {
		_, before, _ = strings.Cut(before, "; before: ")
	}
	if before != "" {
		msg += "; before: " + before
	}
	_, err = ex.ExecContext(ctx, sqlOverBudget, wire.FormatTime(due), wire.FormatTime(now), msg, r.id)
	return err == nil, err
}

// StartAttempt starts a retry within a lease already held (pending →
// pending, attempts+1, the attempt logged as started, leased until
// leasedUntil, the horizon only ever earlier): it fails with ErrLeaseLost
// if the token is no longer current. It returns the attempt's
// number, the stored horizon, and the budget counting the attempt.
func (q *Queue) StartAttempt(ctx context.Context, l Lease, now, horizon, leasedUntil time.Time) (int, time.Time, policy.Budget, error) {
	var n int
	var hz string
	b := policy.Budget{Max: q.cfg.PerHour}
	err := q.InTx(ctx, func(ex execer) error {
		ts := wire.FormatTime(now)
		err := ex.QueryRowContext(ctx, sqlStartAttempt, ts, wire.FormatTime(horizon), wire.FormatTime(leasedUntil), l.ID, l.Token, q.cfg.Owner).Scan(&n, &hz)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrLeaseLost
		}
		if err != nil {
			return err
		}
		if _, err = ex.ExecContext(ctx, sqlInsertAttempt, l.ID, n, l.Token, ts); err != nil {
			return err
		}
		if b.Max <= 0 {
			return nil
		}
		var s string
		err = ex.QueryRowContext(ctx, sqlNthLastAttempt, l.ID, b.Max-1).Scan(&s)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err == nil {
			b.Oldest, _ = wire.ParseTime(s)
		}
		return err
	})
	if err != nil {
		return 0, time.Time{}, policy.Budget{}, err
	}
	h, _ := wire.ParseTime(hz)
	return n, h, b, nil
}
