package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/server"
)

// storeJSON writes v as one line of JSON.
func storeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// storeStatsJSON is the JSON form of `store stats`.
type storeStatsJSON struct {
	Rows                   int64      `json:"rows"`
	InProgress             int64      `json:"in_progress"`
	Completed              int64      `json:"completed"`
	Expired                int64      `json:"expired"`
	Stuck                  int64      `json:"stuck"`
	OldestCreatedAt        *time.Time `json:"oldest_created_at"`
	OldestRecordAgeSeconds float64    `json:"oldest_record_age_seconds"`
	OldestExpiresAt        *time.Time `json:"oldest_expires_at"`
	OldestExpiredAgeSecs   float64    `json:"oldest_expired_age_seconds"`
	TableBytes             int64      `json:"table_bytes"`
	IndexBytes             int64      `json:"index_bytes"`
}

// storeTime is t, or nil for the zero time.
func storeTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// age is now minus t in seconds; 0 for a zero t or one after now.
func age(now, t time.Time) float64 {
	if t.IsZero() || !t.Before(now) {
		return 0
	}
	return now.Sub(t).Seconds()
}

func newStoreStatsCmd(e *env, g *globals, f *storeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "stats (--dsn DSN | --db FILE) [--json]",
		Short: "Print the store's size and health (read-only)",
		Long: `Print the store's rows by state (live in progress, live completed, expired awaiting the
sweeper), the in-progress claims whose lease ended (stuck), the age of the oldest live record
and of the oldest expired row, and the table's and its indexes' bytes: what the collector of
server/prommetrics exports. It scans the table once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer o.close()
			now := time.Now().UTC()
			st, err := o.store.Stats(cmd.Context(), now)
			if err != nil {
				return noTable(err)
			}
			live := st.Rows - st.Expired
			j := storeStatsJSON{
				Rows: st.Rows, InProgress: st.InProgress, Completed: live - st.InProgress, Expired: st.Expired, Stuck: st.Stuck,
				OldestCreatedAt: storeTime(st.OldestCreatedAt), OldestRecordAgeSeconds: age(now, st.OldestCreatedAt),
				OldestExpiresAt: storeTime(st.OldestExpiresAt), OldestExpiredAgeSecs: age(now, st.OldestExpiresAt),
				TableBytes: st.TableBytes, IndexBytes: st.IndexBytes,
			}
			if g.json {
				return storeJSON(e.stdout, j)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "rows\t%d\n", j.Rows)
			fmt.Fprintf(tw, "  in progress\t%d\t(live)\n", j.InProgress)
			fmt.Fprintf(tw, "  completed\t%d\t(live)\n", j.Completed)
			fmt.Fprintf(tw, "  expired\t%d\t(awaiting the sweeper)\n", j.Expired)
			fmt.Fprintf(tw, "stuck\t%d\t(in progress, lease ended)\n", j.Stuck)
			if j.OldestCreatedAt != nil {
				fmt.Fprintf(tw, "oldest live record\t%s\t(%s ago)\n", j.OldestCreatedAt.Format(time.RFC3339), roundAge(j.OldestRecordAgeSeconds))
			} else {
				fmt.Fprintf(tw, "oldest live record\t-\n")
			}
			if j.OldestExpiresAt != nil && j.OldestExpiredAgeSecs > 0 {
				fmt.Fprintf(tw, "oldest expired row\texpired %s\t(%s ago)\n", j.OldestExpiresAt.Format(time.RFC3339), roundAge(j.OldestExpiredAgeSecs))
			} else {
				fmt.Fprintf(tw, "oldest expired row\t-\n")
			}
			fmt.Fprintf(tw, "table bytes\t%d\n", j.TableBytes)
			fmt.Fprintf(tw, "index bytes\t%d\n", j.IndexBytes)
			return tw.Flush()
		},
	}
}

// roundAge formats seconds as a duration rounded to the second.
func roundAge(secs float64) string {
	return (time.Duration(secs * float64(time.Second))).Round(time.Second).String()
}

// inflightJSON is one claim of `store inflight --json`.
type inflightJSON struct {
	Principal   string    `json:"principal"`
	Endpoint    string    `json:"endpoint"`
	Key         string    `json:"key"`
	Token       int64     `json:"token"`
	CreatedAt   time.Time `json:"created_at"`
	AgeSeconds  float64   `json:"age_seconds"`
	LockedUntil time.Time `json:"locked_until"`
	Stuck       bool      `json:"stuck"`
	ExpiresAt   time.Time `json:"expires_at"`
}

func newStoreInflightCmd(e *env, g *globals, f *storeFlags) *cobra.Command {
	var (
		olderThan     time.Duration
		limit         int
		showPrincipal bool
	)
	cmd := &cobra.Command{
		Use:   "inflight (--dsn DSN | --db FILE) [--older-than DUR] [--limit N] [--show-principal] [--json]",
		Short: "List in-progress claims, oldest first (read-only)",
		Long: `List the live in-progress claims created at least --older-than ago, oldest first: principal
(hashed as sha256:<16 hex digits>, the form the payments example logs, unless
--show-principal), endpoint, key, age, holder token (the fencing token of the claim), and the
end of its lease; a claim whose lease ended is stuck: its holder died or froze, and a retry with
the same request takes it over. With --json, one JSON object per line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return usagef("--older-than must not be negative, got %v", olderThan)
			}
			if limit <= 0 {
				return usagef("--limit must be positive, got %d", limit)
			}
			o, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer o.close()
			now := time.Now().UTC()
			recs, err := o.store.InFlight(cmd.Context(), now, olderThan, limit)
			if err != nil {
				return noTable(err)
			}
			rows := make([]inflightJSON, len(recs))
			for i, r := range recs {
				p := r.Principal
				if !showPrincipal {
					p = redact.Hash(p)
				}
				rows[i] = inflightJSON{Principal: p, Endpoint: r.Endpoint, Key: r.Key, Token: r.Token, CreatedAt: r.CreatedAt,
					AgeSeconds: age(now, r.CreatedAt), LockedUntil: r.LockedUntil, Stuck: !r.LockedUntil.After(now), ExpiresAt: r.ExpiresAt}
			}
			if g.json {
				for _, r := range rows {
					if err := storeJSON(e.stdout, r); err != nil {
						return err
					}
				}
				return nil
			}
			if len(rows) == 0 {
				fmt.Fprintln(e.stdout, "no in-progress claims")
				return nil
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PRINCIPAL\tENDPOINT\tKEY\tAGE\tTOKEN\tLEASE")
			for _, r := range rows {
				lease := "ends in " + r.LockedUntil.Sub(now).Round(time.Second).String()
				if r.Stuck {
					lease = "stuck: ended " + now.Sub(r.LockedUntil).Round(time.Second).String() + " ago"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.Principal, r.Endpoint, r.Key, roundAge(r.AgeSeconds), r.Token, lease)
			}
			return tw.Flush()
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&olderThan, "older-than", 0, "list only claims created at least this long ago")
	fl.IntVar(&limit, "limit", 100, "list at most this many claims")
	fl.BoolVar(&showPrincipal, "show-principal", false, "print principals as they are, not hashed")
	return cmd
}

// recordJSON is the JSON form of `store show`.
type recordJSON struct {
	Principal          string              `json:"principal"`
	Endpoint           string              `json:"endpoint"`
	Key                string              `json:"key"`
	State              string              `json:"state"`
	Token              int64               `json:"token"`
	Fingerprint        string              `json:"fingerprint"`
	FingerprintVersion int                 `json:"fingerprint_version"`
	CreatedAt          time.Time           `json:"created_at"`
	ExpiresAt          time.Time           `json:"expires_at"`
	LockedUntil        *time.Time          `json:"locked_until"`
	Status             *int                `json:"status"`
	Header             map[string][]string `json:"header,omitempty"`
	BodyBytes          int                 `json:"body_bytes"`
	BodyOmitted        bool                `json:"body_omitted"`
	Body               *string             `json:"body,omitempty"`
	BodyBase64         []byte              `json:"body_base64,omitempty"`
}

func newStoreShowCmd(e *env, g *globals, f *storeFlags) *cobra.Command {
	var (
		principal, endpoint string
		body                bool
	)
	cmd := &cobra.Command{
		Use:   "show (--dsn DSN | --db FILE) --principal P [--endpoint E] KEY [--body] [--json]",
		Short: "Print one live record (read-only)",
		Long: `Print the live record of (--principal, --endpoint, KEY): its state, fencing token,
request fingerprint, times, and for a completed record the stored status and headers. The
stored body is printed only with --body (as text when it is UTF-8, else base64). Exits 3 when
the scope has no live record.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if principal == "" {
				return usagef("--principal is required")
			}
			o, err := f.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer o.close()
			sc := server.Scope{Principal: principal, Endpoint: endpoint, Key: args[0]}
			rec, err := o.store.Get(cmd.Context(), sc, time.Now().UTC())
			if errors.Is(err, server.ErrRecordNotFound) {
				return &statusError{code: exitNotFound, err: fmt.Errorf("%w for principal %q, endpoint %q, key %q", errNotFound, sc.Principal, sc.Endpoint, sc.Key)}
			}
			if err != nil {
				return noTable(err)
			}
			j := recordJSON{Principal: rec.Principal, Endpoint: rec.Endpoint, Key: rec.Key, State: string(rec.State), Token: rec.Token,
				Fingerprint: hex.EncodeToString(rec.Fingerprint), FingerprintVersion: rec.FingerprintVersion,
				CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt, LockedUntil: storeTime(rec.LockedUntil)}
			if r := rec.Response; r != nil {
				j.Status, j.Header, j.BodyBytes, j.BodyOmitted = &r.Status, r.Header, len(r.Body), r.BodyOmitted
				if body && utf8.Valid(r.Body) {
					s := string(r.Body)
					j.Body = &s
				} else if body {
					j.BodyBase64 = r.Body
				}
			}
			if g.json {
				return storeJSON(e.stdout, j)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "principal\t%s\nendpoint\t%s\nkey\t%s\nstate\t%s\ntoken\t%d\n", j.Principal, j.Endpoint, j.Key, j.State, j.Token)
			fmt.Fprintf(tw, "fingerprint\tv%d %s\n", j.FingerprintVersion, j.Fingerprint)
			fmt.Fprintf(tw, "created\t%s\nexpires\t%s\n", j.CreatedAt.Format(time.RFC3339Nano), j.ExpiresAt.Format(time.RFC3339Nano))
			if j.LockedUntil != nil {
				fmt.Fprintf(tw, "lease ends\t%s\n", j.LockedUntil.Format(time.RFC3339Nano))
			}
			if j.Status != nil {
				fmt.Fprintf(tw, "status\t%d\n", *j.Status)
				for _, name := range slices.Sorted(maps.Keys(j.Header)) {
					for _, v := range j.Header[name] {
						fmt.Fprintf(tw, "header\t%s: %s\n", name, v)
					}
				}
				omitted := ""
				if j.BodyOmitted {
					omitted = " (omitted: larger than the storage cap)"
				}
				fmt.Fprintf(tw, "body\t%d bytes%s\n", j.BodyBytes, omitted)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if body && rec.Response != nil {
				if j.Body != nil {
					fmt.Fprintf(e.stdout, "\n%s\n", *j.Body)
				} else {
					fmt.Fprintf(e.stdout, "\n(base64) %s\n", base64.StdEncoding.EncodeToString(j.BodyBase64))
				}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&principal, "principal", "", "the principal the key belongs to (required)")
	fl.StringVar(&endpoint, "endpoint", "*", `the operation the key was sent to ("*": the key belongs to the principal)`)
	fl.BoolVar(&body, "body", false, "print the stored response body")
	return cmd
}
