package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newStoreMigrateCmd(e *env, g *globals, f *storeFlags) *cobra.Command {
	var convert bool
	cmd := &cobra.Command{
		Use:   "migrate (--dsn DSN | --db FILE) [--partitioned [--convert]] [--json]",
		Short: "Create or upgrade the idempotency table (writes)",
		Long: `Apply the schema migrations the store does not have yet, as the server's Migrate does:
idempotent, and safe while servers run. --db creates the SQLite file if it is missing.

--partitioned (PostgreSQL) is Migrate with pgstore.Config.Partitioned: on a fresh schema it
creates the table partitioned by day; on a plain table with rows it installs the claim function
the partitioned store needs and leaves the table plain. Once every server runs with
Config.Partitioned, --convert converts the plain table online (pgstore.ConvertToPartitioned).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (f.partitioned || convert) && f.dsn == "" {
				return usagef("--partitioned and --convert need --dsn (PostgreSQL)")
			}
			if convert && !f.partitioned {
				return usagef("--convert needs --partitioned")
			}
			o, err := f.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer o.close()
			if err := o.store.Migrate(cmd.Context()); err != nil {
				return err
			}
			if convert {
				if err := o.pg.ConvertToPartitioned(cmd.Context()); err != nil {
					return err
				}
			}
			if g.json {
				return storeJSON(e.stdout, map[string]bool{"migrated": true})
			}
			fmt.Fprintln(e.stdout, "migrated")
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.partitioned, "partitioned", false, "PostgreSQL: the table partitioned by day (pgstore.Config.Partitioned)")
	cmd.Flags().BoolVar(&convert, "convert", false, "with --partitioned: convert a plain table with rows online")
	return cmd
}

func newStoreSweepCmd(e *env, g *globals, f *storeFlags) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "sweep (--dsn DSN | --db FILE) [--grace DUR] [--json]",
		Short: "Delete expired records once, as the sweeper does (writes)",
		Long: `Delete the records that expired at least --grace ago, in short chunks, as one run of
the server's sweeper (server/sweeper) does, and print how many. Safe while servers run.
Interrupted (Ctrl-C), the chunks already deleted stay deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usagef("--grace must not be negative, got %v", grace)
			}
			o, err := f.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer o.close()
			start := time.Now()
			n, err := o.store.Sweep(cmd.Context(), start.Add(-grace))
			if err != nil {
				return fmt.Errorf("sweep (%d deleted before the error): %w", n, noTable(err))
			}
			if g.json {
				return storeJSON(e.stdout, map[string]any{"deleted": n, "seconds": time.Since(start).Seconds()})
			}
			fmt.Fprintf(e.stdout, "deleted %d expired records in %s\n", n, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", time.Minute, "delete only records that expired at least this long ago (the sweeper's grace)")
	return cmd
}
