package main

import (
	"context"
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
With --until-done it exits once no intent is pending: status 0, or 3 if an intent ended failed
or expired during the run. Progress goes to stderr. Headers given with -H are added to every
request at send time and never stored (use them for credentials).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := parseHeaders(headers)
			if err != nil {
				return err
			}
			cfg := &idemkit.Config{Concurrency: concurrency, SendHookFunc: func(r *http.Request) error {
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
	start := time.Now()
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
		if counts[idemkit.StatePending] == 0 {
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
	var bad int
	for _, s := range []idemkit.IntentState{idemkit.StateFailed, idemkit.StateExpired} {
		ended, err := c.List(ctx, &idemkit.ListOptions{State: s, UpdatedSince: start, Limit: 1_000_000})
		if err != nil {
			return err
		}
		for _, in := range ended {
			fmt.Fprintf(stderr, "idemkit: %s %s: %s\n", in.ID, in.State, in.LastError)
		}
		bad += len(ended)
	}
	if bad > 0 {
		return &statusError{code: exitOutcome, err: fmt.Errorf("%d intent(s) ended failed or expired", bad)}
	}
	return nil
}
