package idemriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// ErrNotFound is returned by Get and Wait when no intent has the given id
// (never submitted, rolled back with its transaction, or deleted by River's
// job cleaner after its retention period).
var ErrNotFound = errors.New("idemriver: intent not found")

// Get returns the intent with the given id, as stored, or ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*Intent, error) {
	var jobID int64
	err := c.pool.QueryRow(ctx, `SELECT id FROM `+c.jobTable+` WHERE kind = $1 AND args->>'id' = $2`, intentKind, id).Scan(&jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("idemriver: get %s: %w", id, err)
	}
	job, err := c.river.JobGet(ctx, jobID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("idemriver: get %s: %w", id, err)
	}
	return intentOf(job)
}

// Wait blocks until the intent with the given id is terminal and returns
// it, with a nil error when it succeeded and its State as the error
// otherwise (errors.Is(err, StateUnknown), …). It sends nothing itself:
// a started Client, in this process or another, does. Returns ErrNotFound if
// no intent has that id, and ctx's error if ctx ends first.
func (c *Client) Wait(ctx context.Context, id string) (*Intent, error) {
	delay := 20 * time.Millisecond
	for {
		in, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if in.State.terminal() {
			if in.State == StateSucceeded {
				return in, nil
			}
			return in, in.State
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return in, ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// intentOf reads an intent from its job.
func intentOf(job *rivertype.JobRow) (*Intent, error) {
	var args intentArgs
	if err := json.Unmarshal(job.EncodedArgs, &args); err != nil {
		return nil, fmt.Errorf("idemriver: job %d: args: %w", job.ID, err)
	}
	var meta struct {
		Progress progress `json:"idemkit"`
	}
	if len(job.Metadata) > 0 {
		if err := json.Unmarshal(job.Metadata, &meta); err != nil {
			return nil, fmt.Errorf("idemriver: job %d: metadata: %w", job.ID, err)
		}
	}
	p := meta.Progress
	in := &Intent{
		ID: args.ID, Key: args.Key, JobID: job.ID,
		Method: args.Method, URL: args.URL, Header: args.Header, Body: args.Body, CredentialHeaders: args.CredentialHeaders,
		Attempts: p.Attempts, FirstAttemptAt: p.FirstAttemptAt, Horizon: p.Horizon,
		CreatedAt: job.CreatedAt, LastError: p.LastError, Unanswered: p.Unanswered,
	}
	if out := job.Output(); len(out) > 0 {
		var o Outcome
		if err := json.Unmarshal(out, &o); err != nil {
			return nil, fmt.Errorf("idemriver: job %d: output: %w", job.ID, err)
		}
		in.Outcome = &o
	}
	switch job.State {
	case rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded:
		switch {
		case p.State.terminal():
			in.State = p.State
		case job.State == rivertype.JobStateCancelled:
			in.State = StateCanceled // by an operator (River UI, JobCancel)
		default:
			// River gave up on the job (its MaxAttempts of worker deaths or
			// database errors): attempts may have been sent.
			in.State = StateUnknown
		}
		if in.LastError == "" && len(job.Errors) > 0 {
			in.LastError = job.Errors[len(job.Errors)-1].Error
		}
	case rivertype.JobStateRunning:
		in.State = StatePending
		// River's fetch recorded the run in flight (and any whose worker
		// died): they count as attempts already.
		if n := job.Attempt - p.RiverAttempt; n > 0 {
			in.Attempts += n
			if in.FirstAttemptAt.IsZero() && job.AttemptedAt != nil {
				in.FirstAttemptAt = *job.AttemptedAt
			}
		}
	default:
		in.State = StatePending
		in.NextAttemptAt = job.ScheduledAt
	}
	return in, nil
}
