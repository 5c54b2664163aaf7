package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// states are the values of --state.
var states = []idemkit.IntentState{idemkit.StatePending, idemkit.StateSucceeded, idemkit.StateFailed, idemkit.StateUnknown, idemkit.StateExpired, idemkit.StateCanceled}

func statesList() string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// parseState validates --state.
func parseState(s string) (idemkit.IntentState, error) {
	for _, st := range states {
		if string(st) == s {
			return st, nil
		}
	}
	return "", usagef("--state %q: want one of %s", s, statesList())
}

func newLsCmd(e *env, g *globals) *cobra.Command {
	var (
		state string
		limit int
	)
	cmd := &cobra.Command{
		Use:   "ls [--state STATE] [--limit N] [--json]",
		Short: "List intents (with --json: one JSON object per line)",
		Long: `ls lists the intents of the queue: pending ones in due order, then the others, with
their state, HTTP status, replayed, attempts and next attempt time. With --json, one object
per line with the fields id, key, state, status, replayed, attempts, next_attempt_at,
last_error, method, url, created_at and updated_at (first_attempt_at and horizon once an
attempt started). --state is one of: ` + statesList() + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st idemkit.IntentState
			if state != "" {
				var err error
				if st, err = parseState(state); err != nil {
					return err
				}
			}
			if limit < 1 {
				return usagef("--limit %d: must be at least 1", limit)
			}
			c, _, err := g.openExisting(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := c.List(cmd.Context(), &idemkit.ListOptions{State: st, Limit: limit})
			if err != nil && !isCorrupt(err) {
				return err
			}
			// Damaged rows (err wraps a Corrupt QueueError for each) do not hide the
			// good ones: those are listed, the damage is reported on stderr and
			// the exit status is non-zero.
			listErr := err
			if g.json {
				for _, in := range list {
					if err := writeJSON(e.stdout, toJSON(in)); err != nil {
						return err
					}
				}
				return listErr
			}
			if err := printTable(e.stdout, list); err != nil {
				return err
			}
			return listErr
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only intents in this state: "+statesList())
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many intents")
	return cmd
}

func printTable(w io.Writer, list []*idemkit.Intent) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tSTATUS\tREPLAYED\tATTEMPTS\tNEXT ATTEMPT\tMETHOD\tURL")
	for _, in := range list {
		status, replayed, next := "-", "-", "-"
		if in.Outcome != nil {
			status = fmt.Sprint(in.Outcome.Status)
			replayed = fmt.Sprint(in.Outcome.Replayed)
		}
		if in.State == idemkit.StatePending {
			next = fmtTime(in.NextAttemptAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", in.ID, in.State, status, replayed, in.Attempts, next, in.Method, in.URL)
	}
	return tw.Flush()
}
