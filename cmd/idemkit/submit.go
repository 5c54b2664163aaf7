package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newSubmitCmd(e *env, g *globals) *cobra.Command {
	var rf requestFlags
	cmd := &cobra.Command{
		Use:   "submit --url URL [--method POST] [-H 'Name: value']... [--data STRING|@FILE] [--key KEY]",
		Short: "Queue one request (persisted, not sent) and print its intent id",
		Long: `submit persists one intent and prints its id alone on one line (with --json: the intent
as one JSON object). Nothing is sent: 'idemkit run' sends it. Credential headers
(Authorization, Proxy-Authorization, Cookie, X-Api-Key, *-Token, *-Secret, ...: the SDK's
Config.CredentialHeaders) are never stored, only their names: give them to 'idemkit run -H'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := rf.request(cmd.InOrStdin())
			if err != nil {
				return err
			}
			qf, err := g.queueFile(e)
			if err != nil {
				return err
			}
			c, err := qf.open(cmd.Context(), mayCreate, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			in, err := c.Submit(cmd.Context(), req)
			if errors.Is(err, idemkit.ErrKeyReused) {
				return fmt.Errorf("--key %s is already in the queue with a different request: %w", req.Key, err)
			}
			if err != nil {
				return err
			}
			if creds := in.CredentialHeaders; len(creds) > 0 {
				fmt.Fprintf(e.stderr, "idemkit: %s not stored in the queue; give it to 'idemkit run -H' instead\n", strings.Join(creds, ", "))
			}
			if g.json {
				return writeJSON(e.stdout, toJSON(in))
			}
			fmt.Fprintln(e.stdout, in.ID)
			return nil
		},
	}
	rf.register(cmd)
	return cmd
}
