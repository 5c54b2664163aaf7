package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newShowCmd() *cobra.Command {
	var (
		queue  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show --queue FILE ID [--json]",
		Short: "Show one intent: the request, its attempts and its outcome",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := idemkit.Open(cmd.Context(), queue, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			in, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			log, err := c.Attempts(cmd.Context(), in.ID)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				j := toJSON(in)
				j.Header = in.Header
				j.Body, j.BodyBase64 = bodyFields(in.Body)
				if in.Outcome != nil {
					o := &outcomeJSON{Status: in.Outcome.Status, Replayed: in.Outcome.Replayed, Header: in.Outcome.Header}
					o.Body, o.BodyBase64 = bodyFields(in.Outcome.Body)
					j.Outcome = o
				}
				j.AttemptLog = []attemptJSON{}
				for _, a := range log {
					j.AttemptLog = append(j.AttemptLog, attemptJSON{N: a.N, Token: a.Token, StartedAt: a.StartedAt,
						FinishedAt: timePtr(a.FinishedAt), Status: a.Status, Error: a.Error, Replayed: a.Replayed})
				}
				return json.NewEncoder(w).Encode(j)
			}
			fmt.Fprintf(w, "ID:          %s\nKey:         %s\nState:       %s\nRequest:     %s %s\n", in.ID, in.Key, in.State, in.Method, in.URL)
			printHeader(w, "             ", in.Header)
			fmt.Fprintf(w, "Body:        %d bytes\nAttempts:    %d\nCreated:     %s\n", len(in.Body), in.Attempts, fmtTime(in.CreatedAt))
			fmt.Fprintf(w, "First try:   %s\nHorizon:     %s\n", fmtTime(in.FirstAttemptAt), fmtTime(in.Horizon))
			if in.State == idemkit.StatePending {
				fmt.Fprintf(w, "Next try:    %s\n", fmtTime(in.NextAttemptAt))
			}
			if in.LastError != "" {
				fmt.Fprintf(w, "Last error:  %s\n", in.LastError)
			}
			if len(log) > 0 {
				fmt.Fprintln(w, "\nAttempts:")
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  N\tSTARTED\tFINISHED\tSTATUS\tREPLAYED\tERROR")
				for _, a := range log {
					status := "-"
					if a.Status != 0 {
						status = fmt.Sprint(a.Status)
					}
					fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%v\t%s\n", a.N, fmtTime(a.StartedAt), fmtTime(a.FinishedAt), status, a.Replayed, a.Error)
				}
				tw.Flush()
			}
			if o := in.Outcome; o != nil {
				fmt.Fprintf(w, "\nOutcome:     %d %s (replayed: %v)\n", o.Status, http.StatusText(o.Status), o.Replayed)
				printHeader(w, "             ", o.Header)
				if s, _ := bodyFields(o.Body); s != nil {
					fmt.Fprintf(w, "\n%s\n", *s)
				} else {
					fmt.Fprintf(w, "\n(%d bytes of binary body)\n", len(o.Body))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue file (required)")
	_ = cmd.MarkFlagRequired("queue")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func printHeader(w interface{ Write([]byte) (int, error) }, indent string, h http.Header) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "%s%s: %s\n", indent, k, strings.Join(h[k], ", "))
	}
}
