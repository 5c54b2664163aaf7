package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// partitionJSON is one partition of `store partitions --json`.
type partitionJSON struct {
	Name  string `json:"name"`
	Bound string `json:"bound"`
	// Rows is PostgreSQL's estimate (reltuples): -1 before the first
	// ANALYZE.
	Rows  int64 `json:"rows_estimate"`
	Bytes int64 `json:"bytes"`
}

// pgPartitions lists the partitions of the idempotency table with their
// bounds, estimated rows and total size.
const pgPartitions = `SELECT c.relname, coalesce(pg_get_expr(c.relpartbound, c.oid), ''), c.reltuples::bigint, pg_total_relation_size(c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'idempotency_keys'::regclass
ORDER BY c.relname`

func newStorePartitionsCmd(e *env, g *globals, f *storeFlags) *cobra.Command {
	var (
		maintain bool
		grace    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "partitions (--dsn DSN | --db FILE) [--maintain [--grace DUR]] [--json]",
		Short: "List the idempotency table's partitions (read-only unless --maintain)",
		Long: `List the partitions of a partitioned idempotency table (PostgreSQL) with their bounds,
estimated rows and bytes. A plain table (and every SQLite store) has none: its expired rows are
deleted by the sweeper. With --json, one object: {"partitioned": bool, "partitions": [...]}
(with --maintain also "created", "dropped" and "dropped_rows").

--maintain (writes) does what the sweeper does on a partitioned table: creates the partitions
of the coming days and drops those whose rows all expired at least --grace ago.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usagef("--grace must not be negative, got %v", grace)
			}
			o, err := f.open(cmd.Context(), !maintain)
			if err != nil {
				return err
			}
			defer o.close()
			out := map[string]any{}
			if maintain && o.pg != nil {
				rep, err := o.pg.MaintainPartitions(cmd.Context(), time.Now().Add(-grace))
				if err != nil {
					return err
				}
				out["created"], out["dropped"], out["dropped_rows"] = nonNil(rep.Created), nonNil(rep.Dropped), rep.DroppedRows
				if !g.json {
					fmt.Fprintf(e.stdout, "created %d partitions, dropped %d (%d rows)\n", len(rep.Created), len(rep.Dropped), rep.DroppedRows)
				}
			}
			parts := []partitionJSON{}
			partitioned := false
			if o.pool != nil {
				var kind string
				if err := o.pool.QueryRow(cmd.Context(), `SELECT relkind::text FROM pg_class WHERE oid = 'idempotency_keys'::regclass`).Scan(&kind); err != nil {
					return noTable(err)
				}
				partitioned = kind == "p"
				rows, err := o.pool.Query(cmd.Context(), pgPartitions)
				if err != nil {
					return err
				}
				for rows.Next() {
					var p partitionJSON
					if err := rows.Scan(&p.Name, &p.Bound, &p.Rows, &p.Bytes); err != nil {
						rows.Close()
						return err
					}
					parts = append(parts, p)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return err
				}
			}
			if g.json {
				out["partitioned"], out["partitions"] = partitioned, parts
				return storeJSON(e.stdout, out)
			}
			if !partitioned {
				fmt.Fprintln(e.stdout, "idempotency_keys is not partitioned: the sweeper deletes its expired rows")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tBOUND\tROWS (EST.)\tBYTES")
			for _, p := range parts {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", p.Name, p.Bound, p.Rows, p.Bytes)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&maintain, "maintain", false, "create the coming days' partitions and drop expired ones (writes)")
	cmd.Flags().DurationVar(&grace, "grace", time.Minute, "with --maintain: drop only partitions whose rows all expired at least this long ago")
	return cmd
}

// nonNil is s, or an empty slice for nil (JSON [] rather than null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
