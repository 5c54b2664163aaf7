package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newCancelCmd() *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "cancel --queue FILE ID",
		Short: "Cancel a pending intent so that it is never sent again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := idemkit.Open(cmd.Context(), queue, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Cancel(cmd.Context(), args[0])
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue file (required)")
	_ = cmd.MarkFlagRequired("queue")
	return cmd
}

func newPruneCmd() *cobra.Command {
	var (
		queue     string
		olderThan time.Duration
	)
	cmd := &cobra.Command{
		Use:   "prune --queue FILE [--older-than 168h]",
		Short: "Delete terminal intents last updated before --older-than ago; print how many",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := idemkit.Open(cmd.Context(), queue, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			n, err := c.Prune(cmd.Context(), olderThan)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), n)
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "queue file (required)")
	_ = cmd.MarkFlagRequired("queue")
	cmd.Flags().DurationVar(&olderThan, "older-than", 7*24*time.Hour, "minimum age of the intents to delete")
	return cmd
}
