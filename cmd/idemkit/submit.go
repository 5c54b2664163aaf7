package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newSubmitCmd() *cobra.Command {
	var queue string
	var rf requestFlags
	cmd := &cobra.Command{
		Use:   "submit --queue FILE --url URL [--method POST] [-H 'Name: value']... [--data STRING|@FILE] [--key KEY]",
		Short: "Queue one request (persisted, not sent) and print its intent id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := rf.request(cmd.InOrStdin())
			if err != nil {
				return err
			}
			if creds := credentialsIn(req.Header); len(creds) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "idemkit: %s not stored in the queue; give it to 'idemkit run -H' instead\n", strings.Join(creds, ", "))
			}
			c, err := idemkit.Open(cmd.Context(), queue, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			in, err := c.Submit(cmd.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), in.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue file (required)")
	_ = cmd.MarkFlagRequired("queue")
	rf.register(cmd)
	return cmd
}
