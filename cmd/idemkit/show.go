package main

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newShowCmd(e *env, g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show one intent: the request, its attempts and its outcome",
		Long: `show prints one intent: the request as stored (credential headers never are), every
attempt with its status or error, and the outcome. ID is an intent id, its short id
(the last 8 characters, as run and retry print it), a unique prefix of one, or a key.
With --json: one object, the ls fields plus header, body, outcome and attempt_log.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := g.openExisting(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			in, err := find(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			log, err := c.Attempts(cmd.Context(), in.ID)
			if err != nil {
				return err
			}
			w := e.stdout
			if g.json {
				return writeJSON(w, toFullJSON(in, log))
			}
			fmt.Fprintf(w, "ID:          %s\nKey:         %s\nState:       %s\n", in.ID, in.Key, in.State)
			if o := in.Outcome; o != nil {
				fmt.Fprintf(w, "Status:      %s\nReplayed:    %v\n", statusText(o.Status), o.Replayed)
			}
			fmt.Fprintf(w, "Request:     %s %s\n", in.Method, in.URL)
			printHeader(w, "             ", in.Header)
			for _, n := range in.CredentialHeaders {
				fmt.Fprintf(w, "             %s: (not stored: give it with -H when resuming)\n", n)
			}
			fmt.Fprintf(w, "Body:        %d bytes\nAttempts:    %d\nCreated:     %s\n", len(in.Body), in.Attempts, fmtTime(in.CreatedAt))
			fmt.Fprintf(w, "First try:   %s\nHorizon:     %s\n", fmtTime(in.FirstAttemptAt), fmtTime(in.Horizon))
			if in.State == idemkit.StatePending {
				fmt.Fprintf(w, "Next try:    %s\n", fmtTime(in.NextAttemptAt))
			}
			if !in.LeasedUntil.IsZero() {
				fmt.Fprintf(w, "Leased by:   %s until %s (a holder on this host that died is taken over by the next run)\n", holder(in), fmtTime(in.LeasedUntil))
			}
			if in.Unanswered > 0 {
				fmt.Fprintf(w, "Unanswered:  attempt %d got no answer (it may have reached the server)\n", in.Unanswered)
			}
			if le := lastError(in); le != "" {
				if real := withAttemptError(in, log).LastError; real != le {
					le = fmt.Sprintf("%s (then: %s)", real, le)
				}
				fmt.Fprintf(w, "Last error:  %s\n", le)
			}
			if in.State == idemkit.StateFailed {
				if next := retriedAs(cmd.Context(), c, in); next != nil {
					fmt.Fprintf(w, "Retried as:  %s (key %s, %s)\n", next.ID, next.Key, next.State)
				}
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
	return cmd
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
