package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// intentJSON is the JSON form of an intent in `ls --json` and `show --json`.
type intentJSON struct {
	ID             string        `json:"id"`
	Key            string        `json:"key"`
	State          string        `json:"state"`
	Method         string        `json:"method"`
	URL            string        `json:"url"`
	Attempts       int           `json:"attempts"`
	Status         *int          `json:"status"`
	Replayed       bool          `json:"replayed"`
	NextAttemptAt  *time.Time    `json:"next_attempt_at,omitempty"`
	FirstAttemptAt *time.Time    `json:"first_attempt_at,omitempty"`
	Horizon        *time.Time    `json:"horizon,omitempty"`
	CreatedAt      time.Time     `json:"created_at"`
	UpdatedAt      time.Time     `json:"updated_at"`
	LastError      string        `json:"last_error,omitempty"`
	Header         any           `json:"header,omitempty"`
	Body           *string       `json:"body,omitempty"`
	BodyBase64     []byte        `json:"body_base64,omitempty"`
	Outcome        *outcomeJSON  `json:"outcome,omitempty"`
	AttemptLog     []attemptJSON `json:"attempt_log,omitempty"`
}

type outcomeJSON struct {
	Status     int     `json:"status"`
	Replayed   bool    `json:"replayed"`
	Header     any     `json:"header"`
	Body       *string `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
}

type attemptJSON struct {
	N          int        `json:"n"`
	Token      int64      `json:"token"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Status     int        `json:"status,omitempty"`
	Error      string     `json:"error,omitempty"`
	Replayed   bool       `json:"replayed"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// bodyFields returns a body as text when it is valid UTF-8, else as base64.
func bodyFields(b []byte) (*string, []byte) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	return nil, b
}

func toJSON(in *idemkit.Intent) *intentJSON {
	j := &intentJSON{
		ID: in.ID, Key: in.Key, State: string(in.State), Method: in.Method, URL: in.URL,
		Attempts: in.Attempts, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt, LastError: in.LastError,
		FirstAttemptAt: timePtr(in.FirstAttemptAt), Horizon: timePtr(in.Horizon),
	}
	if in.State == idemkit.StatePending {
		j.NextAttemptAt = timePtr(in.NextAttemptAt)
	}
	if in.Outcome != nil {
		st := in.Outcome.Status
		j.Status = &st
		j.Replayed = in.Outcome.Replayed
	}
	return j
}

func newLsCmd() *cobra.Command {
	var (
		queue  string
		state  string
		asJSON bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "ls --queue FILE [--state STATE] [--json]",
		Short: "List intents (with --json: one JSON object per line)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := idemkit.Open(cmd.Context(), queue, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			list, err := c.List(cmd.Context(), &idemkit.ListOptions{State: idemkit.IntentState(state), Limit: limit})
			if err != nil && !errors.Is(err, idemkit.ErrQueueCorrupt) {
				return err
			}
			// Damaged rows (err wraps ErrQueueCorrupt for each) do not hide the
			// good ones: those are listed, the damage is reported on stderr and
			// the exit status is non-zero.
			listErr := err
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, in := range list {
					if err := enc.Encode(toJSON(in)); err != nil {
						return err
					}
				}
				return listErr
			}
			if err := printTable(cmd.OutOrStdout(), list); err != nil {
				return err
			}
			return listErr
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue file (required)")
	_ = cmd.MarkFlagRequired("queue")
	cmd.Flags().StringVar(&state, "state", "", "only intents in this state: pending, succeeded, failed, expired, canceled")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	cmd.Flags().IntVar(&limit, "limit", 1000, "at most this many intents")
	return cmd
}

func printTable(w io.Writer, list []*idemkit.Intent) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tSTATUS\tREPLAYED\tMETHOD\tURL")
	for _, in := range list {
		status, replayed := "-", "-"
		if in.Outcome != nil {
			status = fmt.Sprint(in.Outcome.Status)
			replayed = fmt.Sprint(in.Outcome.Replayed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", in.ID, in.State, in.Attempts, status, replayed, in.Method, in.URL)
	}
	return tw.Flush()
}
