package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newDoCmd() *cobra.Command {
	var queue string
	var rf requestFlags
	cmd := &cobra.Command{
		Use:   "do [--queue FILE] --url URL [--method POST] [-H 'Name: value']... [--data STRING|@FILE] [--key KEY]",
		Short: "Submit one request and send it until it has an outcome; print the response body",
		Long: `do persists the request as an intent (in ./` + defaultDoQueue + ` unless --queue is given),
sends it, retries it with the same key, and prints the response body on stdout. Credentials
given with -H are used for this run only and never stored. If do is interrupted, the intent
stays queued: 'idemkit run' finishes it with the same key. Exit status 3 when the request
ended failed (the body is still printed) or expired.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := rf.request(cmd.InOrStdin())
			if err != nil {
				return err
			}
			c, err := idemkit.Open(cmd.Context(), queue, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			in, err := c.Do(cmd.Context(), req)
			if in != nil && in.Outcome != nil {
				if _, werr := cmd.OutOrStdout().Write(in.Outcome.Body); werr != nil {
					return werr
				}
			}
			var re *idemkit.ResultError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &re):
				return err
			case in != nil && cmd.Context().Err() != nil:
				return fmt.Errorf("interrupted; intent %s stays queued: resume it with 'idemkit run --queue %s'", in.ID, queue)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&queue, "queue", defaultDoQueue, "queue file")
	rf.register(cmd)
	return cmd
}
