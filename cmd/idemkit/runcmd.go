package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// progressInterval is how often `run --until-done` looks at the queue.
const progressInterval = 200 * time.Millisecond

func newRunCmd() *cobra.Command {
	var (
		queue       string
		untilDone   bool
		concurrency int
		headers     []string
	)
	cmd := &cobra.Command{
		Use:   "run --queue FILE [--until-done] [--concurrency N] [-H 'Authorization: Bearer x']...",
		Short: "Send due intents until SIGINT/SIGTERM, or with --until-done until none is pending",
		Long: `run sends due intents, retrying each with its own key, until SIGINT or SIGTERM.
With --until-done it exits once no intent is pending: status 0, or 3 if any intent in the
queue is failed or expired (inspect them with 'idemkit ls'), or 1 if a pending intent's row is
damaged (it is never sent). Progress goes to stderr. Headers given with -H are added to every
request at send time and never stored (use them for credentials); -H Idempotency-Key is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := parseHeaders(headers)
			if err != nil {
				return err
			}
			if _, ok := h["Idempotency-Key"]; ok {
				// Added to every request, it would replace each intent's own key.
				return usageError{fmt.Errorf("-H Idempotency-Key: every intent has its own key (give it to 'idemkit submit --key')")}
			}
			cfg := &idemkit.Config{Concurrency: concurrency, SendHookFunc: func(_ string, r *http.Request) error {
				for k, v := range h {
					r.Header[k] = v
				}
				return nil
			}}
			c, err := idemkit.Open(cmd.Context(), queue, cfg)
			if err != nil {
				return err
			}
			defer c.Close()
			if !untilDone {
				return c.Run(cmd.Context())
			}
			return runUntilDone(cmd, c)
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue file (required)")
	_ = cmd.MarkFlagRequired("queue")
	cmd.Flags().BoolVar(&untilDone, "until-done", false, "exit once every intent is terminal")
	cmd.Flags().IntVar(&concurrency, "concurrency", idemkit.ConcurrencyDefault, "intents sent at once")
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "header added at send time, never stored (repeatable)")
	return cmd
}

func runUntilDone(cmd *cobra.Command, c *idemkit.Client) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	// Pending rows that cannot be decoded are never sent (a claim sets them
	// aside): they must not keep run waiting forever.
	damaged, damageErr := damagedPending(ctx, c)
	if damageErr != nil && damaged == 0 {
		return damageErr
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	last := ""
	ticker := time.NewTicker(progressInterval)
	defer ticker.Stop()
	for {
		counts, err := c.Counts(ctx)
		if err != nil {
			cancel()
			<-done
			return err
		}
		line := fmt.Sprintf("%d pending, %d succeeded, %d failed, %d expired, %d canceled",
			counts[idemkit.StatePending], counts[idemkit.StateSucceeded], counts[idemkit.StateFailed],
			counts[idemkit.StateExpired], counts[idemkit.StateCanceled])
		if line != last {
			fmt.Fprintln(stderr, "idemkit:", line)
			last = line
		}
		if counts[idemkit.StatePending] <= damaged {
			break
		}
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return fmt.Errorf("interrupted with %d intent(s) pending (they stay queued)", counts[idemkit.StatePending])
		case <-ticker.C:
		}
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}
	// Every intent in the queue counts, not only those that ended during
	// this run: exit 0 means that none is failed or expired.
	counts, err := c.Counts(ctx)
	if err != nil {
		return err
	}
	bad := counts[idemkit.StateFailed] + counts[idemkit.StateExpired]
	for _, s := range []idemkit.IntentState{idemkit.StateFailed, idemkit.StateExpired} {
		ended, err := c.List(ctx, &idemkit.ListOptions{State: s, Limit: 1_000_000})
		for _, in := range ended {
			fmt.Fprintf(stderr, "idemkit: %s %s: %s\n", in.ID, in.State, in.LastError)
		}
		if err != nil {
			return err
		}
	}
	if damageErr != nil {
		return fmt.Errorf("%d pending intent(s) cannot be sent: %w", damaged, damageErr)
	}
	if bad > 0 {
		return &statusError{code: exitOutcome, err: fmt.Errorf("%d intent(s) ended failed or expired", bad)}
	}
	return nil
}

// damagedPending returns how many pending intents cannot be decoded and
// the error that reports them; with 0, a non-nil error is a failure to
// look.
func damagedPending(ctx context.Context, c *idemkit.Client) (int, error) {
	counts, err := c.Counts(ctx)
	if err != nil || counts[idemkit.StatePending] == 0 {
		return 0, err
	}
	_, err = c.List(ctx, &idemkit.ListOptions{State: idemkit.StatePending, Limit: counts[idemkit.StatePending]})
	if err == nil || !errors.Is(err, idemkit.ErrQueueCorrupt) {
		return 0, err
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap()), err
	}
	return 1, err
}
