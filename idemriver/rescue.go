package idemriver

import (
	"context"
	"time"
)

// rescueMessage is the error a rescue records on the job.
const rescueMessage = "idemkit: worker gone (lease expired); taken over with the same key"

// rescueLoop makes the jobs of this Client's queue whose worker died
// available again, until ctx ends: River's rescuer does the same, but only
// on its leader and every 30 s, after an hour by default.
func (c *Client) rescueLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.rescueInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := c.rescue(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("idemriver: rescue", "error", err)
		} else if n > 0 {
			c.cfg.Logger.Info("idemriver: taking over intents of a worker gone", "jobs", n)
		}
	}
}

// rescue makes every running intent job attempted longer than the lease ago
// available, with an error saying why, and returns how many. The worker
// that takes it finds a run with no result recorded (see
// progress.recoverLost): the error's time is that run's start.
func (c *Client) rescue(ctx context.Context) (int64, error) {
	tag, err := c.pool.Exec(ctx, `UPDATE `+c.jobTable+`
		SET state = 'available', scheduled_at = now(),
			errors = array_append(errors, jsonb_build_object('at', attempted_at, 'attempt', attempt,
				'error', $4::text, 'trace', ''))
		WHERE kind = $1 AND queue = $2 AND state = 'running' AND attempted_at < now() - make_interval(secs => $3)`,
		intentKind, c.cfg.Queue, c.cfg.LeaseDuration.Seconds(), rescueMessage)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
