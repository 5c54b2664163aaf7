package queue

import (
	"context"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// AttemptLog is what an attempt produced, as logged.
type AttemptLog struct {
	N        int
	Status   int
	Error    string
	Replayed bool
	// NotSent: the attempt is known never to have left this process.
	NotSent bool
	// Learned is the Idempotency-Window the response advertised, if any,
	// remembered for Host; Horizon the intent's horizon after it (zero:
	// unchanged).
	Learned time.Duration
	Horizon time.Time
	Host    string
}

// Change is what one claim's decision does to its intent, applied in one
// transaction by Apply.
type Change struct {
	// Attempt is the attempt to log (its end), if any.
	Attempt *AttemptLog
	// State is Pending (a wait) or the terminal state the intent ends in.
	State State
	// Due is when a pending intent may be attempted next. LeasedUntil, if
	// not zero, keeps the lease until then (an in-process sleep); zero
	// releases it.
	Due, LeasedUntil time.Time
	// Outcome is a terminal intent's answer, if it has one.
	Outcome *Outcome
	// LastError is the intent's last error.
	LastError string
	// Wake are other pending intents, nobody's, made due at once (their
	// host answered); HandOff one made due by HandOffAt (it probes its
	// host next).
	Wake      []string
	HandOff   string
	HandOffAt time.Time
}

// Applied is what Apply changed besides the intent.
type Applied struct {
	// Woken is how many of Change.Wake were made due.
	Woken int
}

// Apply applies change c to the intent of lease l at now, in one
// transaction: the attempt logged (its window remembered for its host, the
// horizon moved earlier), then pending → pending (due at c.Due, the lease
// kept until c.LeasedUntil or released) or pending → succeeded, failed,
// unknown or expired (with c.Outcome, the lease released), and the intents
// of c.Wake and c.HandOff made due. It fails with ErrLeaseLost if l's
// token is no longer current (nothing is written then).
//
// A terminal change with an outcome (an answer the server gave) is
// committed without an fsync (synchronous=NORMAL, WAL mode only): a process
// crash cannot lose it (the WAL pages are the operating system's once
// written), a power cut can, and then the intent is pending again and its
// next attempt, same key, gets the server's stored answer. The intent
// itself and its attempt were fsynced before the first byte was sent.
// Every other change keeps the fsync.
func (q *Queue) Apply(ctx context.Context, l Lease, now time.Time, c Change) (Applied, error) {
	var out Applied
	err := q.tx(ctx, c.State != Pending && c.Outcome != nil, func(ex execer) error {
		out = Applied{}
		if c.Attempt != nil {
			if err := logAttempt(ctx, ex, l.ID, now, c.Attempt); err != nil {
				return err
			}
		}
		ts := wire.FormatTime(now)
		var args []any
		query := sqlFinish
		if c.State == Pending {
			var until, owner any
			if !c.LeasedUntil.IsZero() {
				until, owner = wire.FormatTime(c.LeasedUntil), q.cfg.Owner
			}
			query = sqlReschedule
			args = []any{wire.FormatTime(c.Due), until, owner, c.LastError, ts, l.ID, l.Token}
		} else {
			var st, hdr, body, rep any
			reused := 0
			if o := c.Outcome; o != nil {
				st, hdr, body, rep, reused = o.Status, wire.EncodeHeader(o.Header), o.Body, boolInt(o.Replayed), boolInt(o.KeyReused)
				if o.Body == nil {
					body = []byte{}
				}
			}
			args = []any{string(c.State), st, hdr, body, rep, c.LastError, ts, l.ID, l.Token, reused}
		}
		res, err := ex.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrLeaseLost
		}
		if len(c.Wake) > 0 {
			if out.Woken, err = makeDue(ctx, ex, c.Wake, now); err != nil {
				return err
			}
		}
		if c.HandOff != "" {
			_, err = makeDue(ctx, ex, []string{c.HandOff}, c.HandOffAt)
		}
		return err
	})
	return out, err
}

func logAttempt(ctx context.Context, ex execer, id string, now time.Time, a *AttemptLog) error {
	var status any
	if a.Status != 0 {
		status = a.Status
	}
	if _, err := ex.ExecContext(ctx, sqlFinishAttempt, wire.FormatTime(now), status, a.Error, boolInt(a.Replayed), boolInt(a.NotSent), id, a.N); err != nil {
		return err
	}
	if a.Learned > 0 {
		if _, err := ex.ExecContext(ctx, sqlUpsertHost, a.Host, int64(a.Learned/time.Second), wire.FormatTime(now)); err != nil {
			return err
		}
	}
	if !a.Horizon.IsZero() {
		if _, err := ex.ExecContext(ctx, sqlShortenHorizon, wire.FormatTime(a.Horizon), id); err != nil {
			return err
		}
	}
	return nil
}

// Cancel ends a pending intent canceled (pending → canceled, the lease
// released) and reports whether it did.
func (q *Queue) Cancel(ctx context.Context, id string, now time.Time) (bool, error) {
	var ok bool
	err := q.InTx(ctx, func(ex execer) error {
		res, err := ex.ExecContext(ctx, sqlCancel, wire.FormatTime(now), id)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n == 1
		return nil
	})
	return ok, err
}

// sqlResend puts an intent that ended unknown or failed back in the queue,
// due now, with the same key; its attempt log, first attempt and horizon
// are kept (the horizon still bounds it).
const sqlResend = `UPDATE idemkit_intents SET state = 'pending', outcome_status = NULL, outcome_header = NULL,
	outcome_body = NULL, outcome_replayed = NULL, outcome_key_reused = 0, next_attempt_at = ?1, updated_at = ?1,
	last_error = 'resent under the same key (was ' || state || '): ' || last_error
WHERE id = ?2 AND state IN ('unknown', 'failed') AND (horizon IS NULL OR horizon > ?1)`

// Resend puts an intent that ended unknown or failed back in the queue
// under the same key (unknown or failed → pending, due at now, its outcome
// cleared), unless its horizon has passed; it reports whether it did.
func (q *Queue) Resend(ctx context.Context, id string, now time.Time) (bool, error) {
	var n int64
	err := q.InTx(ctx, func(ex execer) error {
		res, err := ex.ExecContext(ctx, sqlResend, wire.FormatTime(now), id)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n > 0, err
}

// MakeDue makes the given pending intents that nobody holds due at now, if
// they were due later (pending → pending, due now), and returns how many
// it changed.
func (q *Queue) MakeDue(ctx context.Context, ids []string, now time.Time) (int, error) {
	var n int
	err := q.InTx(ctx, func(ex execer) error {
		var err error
		n, err = makeDue(ctx, ex, ids, now)
		return err
	})
	return n, err
}

func makeDue(ctx context.Context, ex execer, ids []string, now time.Time) (int, error) {
	args := []any{wire.FormatTime(now)}
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := ex.ExecContext(ctx, `UPDATE idemkit_intents SET next_attempt_at = ?1
		WHERE state = 'pending' AND lease_owner IS NULL AND leased_until IS NULL AND next_attempt_at > ?1
		AND id IN (?`+strings.Repeat(",?", len(ids)-1)+`)`, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
