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

// NthLastAttempt returns the start time of the intent's n-th most recent
// attempt, or the zero time if it has fewer than n.
func (q *Queue) NthLastAttempt(ctx context.Context, id string, n int) (time.Time, error) {
	var s string
	err := q.db.QueryRowContext(ctx, sqlNthLastAttempt, id, n-1).Scan(&s)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, Interpret(err)
	}
	t, err := wire.ParseTime(s)
	if err != nil {
		return time.Time{}, Errorf(Corrupt, "attempt of %s: %w", id, err)
	}
	return t, nil
}

// Get returns the intent with the given id, or ErrNotFound.
func (q *Queue) Get(ctx context.Context, id string) (*Intent, error) {
	r, err := scanRow(q.db.QueryRowContext(ctx, sqlSelectByID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, Interpret(err)
	}
	return decodeIntent(r)
}

// ListOptions filters List.
type ListOptions struct {
	State        State
	UpdatedSince time.Time
	Limit        int
}

// List returns intents matching o: pending ones in due order, terminal
// ones by last update, all of them by creation. Rows that cannot be
// decoded are left out and reported, joined.
func (q *Queue) List(ctx context.Context, o *ListOptions) ([]*Intent, error) {
	var where []string
	var args []any
	order := "created_at, id"
	if o.State != "" {
		if !o.State.Valid() {
			return nil, policy.Invalidf("ListOptions.State: unknown state %q", o.State)
		}
		where = append(where, "state = ?")
		args = append(args, string(o.State))
		if o.State == Pending {
			order = "next_attempt_at, id"
		} else {
			// Lets the planner use the partial index idemkit_intents_terminal.
			where = append(where, "state <> 'pending'")
			order = "updated_at, id"
		}
	}
	if !o.UpdatedSince.IsZero() {
		where = append(where, "updated_at >= ?")
		args = append(args, wire.FormatTime(o.UpdatedSince))
	}
	query := `SELECT ` + rowColumns + ` FROM idemkit_intents`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY " + order + " LIMIT ?"
	args = append(args, o.Limit)
	rows, err := q.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, Interpret(err)
	}
	defer rows.Close()
	var out []*Intent
	var damaged []error
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, Interpret(err)
		}
		in, err := decodeIntent(r)
		if err != nil {
			// One damaged row must not hide the others: list them and
			// report it (claim quarantines such a row; Get reports it).
			damaged = append(damaged, err)
			continue
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, Interpret(err)
	}
	return out, errors.Join(damaged...)
}

// Attempts returns the attempt log of an intent, oldest first.
func (q *Queue) Attempts(ctx context.Context, id string) ([]*Attempt, error) {
	rows, err := q.db.QueryContext(ctx, sqlSelectAttempts, id)
	if err != nil {
		return nil, Interpret(err)
	}
	defer rows.Close()
	var out []*Attempt
	for rows.Next() {
		a := &Attempt{}
		var started string
		var finished *string
		var status *int64
		var replayed, notSent int64
		if err := rows.Scan(&a.N, &a.Token, &started, &finished, &status, &a.Error, &replayed, &notSent); err != nil {
			return nil, Interpret(err)
		}
		var err error
		if a.StartedAt, err = wire.ParseTime(started); err != nil {
			return nil, Errorf(Corrupt, "attempt %d of %s: %w", a.N, id, err)
		}
		if finished != nil {
			if a.FinishedAt, err = wire.ParseTime(*finished); err != nil {
				return nil, Errorf(Corrupt, "attempt %d of %s: %w", a.N, id, err)
			}
		}
		if status != nil {
			a.Status = int(*status)
		}
		a.Replayed = replayed != 0
		a.NotSent = notSent != 0
		out = append(out, a)
	}
	return out, Interpret(rows.Err())
}

// Counts returns the number of intents in each state.
func (q *Queue) Counts(ctx context.Context) (map[State]int, error) {
	rows, err := q.db.QueryContext(ctx, sqlCounts)
	if err != nil {
		return nil, Interpret(err)
	}
	defer rows.Close()
	out := map[State]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, Interpret(err)
		}
		out[State(s)] = n
	}
	return out, Interpret(rows.Err())
}

// NextDue returns the earliest time a pending intent can be claimed (its
// due time, or its lease's end if later), or the zero time when none is
// pending (intents claims skip are left out).
func (q *Queue) NextDue(ctx context.Context, skip []string) (time.Time, error) {
	var s *string
	if err := q.db.QueryRowContext(ctx, sqlNextDue, q.origin, q.self, skipJSON(skip)).Scan(&s); err != nil {
		return time.Time{}, Interpret(err)
	}
	if s == nil {
		return time.Time{}, nil
	}
	t, err := wire.ParseTime(*s)
	if err != nil {
		return time.Time{}, Errorf(Corrupt, "next_attempt_at: %w", err)
	}
	return t, nil
}

// Prune deletes terminal intents (in states, if any) last updated before
// cutoff, and their attempt logs, a thousand per transaction.
func (q *Queue) Prune(ctx context.Context, cutoff time.Time, states []State) (int, error) {
	query, args := sqlPruneBatch, []any{wire.FormatTime(cutoff)}
	if len(states) > 0 {
		query = strings.Replace(query, " LIMIT", " AND state IN (?"+strings.Repeat(",?", len(states)-1)+") LIMIT", 1)
		for _, s := range states {
			args = append(args, string(s))
		}
	}
	total := 0
	for {
		var n int
		err := q.InTx(ctx, func(ex execer) error {
			rows, err := ex.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			var ids []any
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			in := "(?" + strings.Repeat(",?", len(ids)-1) + ")"
			if _, err := ex.ExecContext(ctx, `DELETE FROM idemkit_attempts WHERE intent_id IN `+in, ids...); err != nil {
				return err
			}
			if _, err := ex.ExecContext(ctx, `DELETE FROM idemkit_intents WHERE id IN `+in, ids...); err != nil {
				return err
			}
			n = len(ids)
			return nil
		})
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}
