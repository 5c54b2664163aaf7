package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newCancelCmd(e *env, g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a pending intent so that it is never sent again",
		Long: `cancel ends a pending intent as canceled: it is never sent again. An attempt already
on the wire cannot be recalled. ID is an intent id, its short id
(the last 8 characters), a unique prefix of one, or a key.
Prints the intent (with --json: one JSON object).`,
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
			if in.State != idemkit.StatePending && in.State != idemkit.StateCanceled {
				return fmt.Errorf("cannot cancel intent %s: it already ended %s (cancel is for pending intents)", in.ID, in.State)
			}
			if err := c.Cancel(cmd.Context(), in.ID); err != nil {
				return err
			}
			if in, err = c.Get(cmd.Context(), in.ID); err != nil {
				return err
			}
			if g.json {
				return writeJSON(e.stdout, toJSON(in))
			}
			fmt.Fprintln(e.stdout, summary(in))
			return nil
		},
	}
	return cmd
}

func newPruneCmd(e *env, g *globals) *cobra.Command {
	var (
		olderThan time.Duration
		stateArgs []string
	)
	cmd := &cobra.Command{
		Use:   "prune [--older-than 168h] [--state failed]...",
		Short: "Delete terminal intents last updated before --older-than ago; print how many",
		Long: `prune deletes the intents that ended (succeeded, failed, expired, canceled) and were
last updated more than --older-than ago, with their attempt logs, and prints how many (with
--json: {"deleted": N}). Pending intents are never pruned. Succeeded intents are receipts:
keep --older-than above the time you may need them, or give --state (repeatable: failed,
expired, canceled, succeeded) to delete only intents in those states:
'idemkit prune --older-than 0s --state failed' keeps every receipt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return usagef("--older-than %v: must not be negative", olderThan)
			}
			var states []idemkit.IntentState
			for _, a := range stateArgs {
				st, err := parseState(a)
				if err != nil {
					return err
				}
				if st == idemkit.StatePending {
					return usagef("--state pending: pending intents are never pruned (cancel them first)")
				}
				states = append(states, st)
			}
			c, _, err := g.openExisting(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			n, err := c.Prune(cmd.Context(), olderThan, states...)
			if err != nil {
				return err
			}
			if g.json {
				return writeJSON(e.stdout, map[string]int{"deleted": n})
			}
			fmt.Fprintln(e.stdout, n)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 7*24*time.Hour, "minimum age of the intents to delete")
	cmd.Flags().StringArrayVar(&stateArgs, "state", nil, "delete only intents in this state (repeatable): succeeded, failed, expired, canceled")
	return cmd
}

func newRetryCmd(e *env, g *globals) *cobra.Command {
	var yes, sameKey, acceptDouble bool
	cmd := &cobra.Command{
		Use:   "retry ID [--same-key | --yes] [--i-accept-double-charge]",
		Short: "Re-queue a failed intent under a new key, once you know it never took effect (or --same-key)",
		Long: `retry queues the request of a failed intent again as a new intent, under a NEW key
(the old key's answer is final: resending under it only replays the failure). Only do this
when the request never took effect: a 4xx usually means the server refused it (a missing
credential, a bad field), but only you can know. retry asks you to type "yes" (or give
--yes).

It refuses an intent whose outcome is unknown, and exits 4:
  - "unknown": an attempt's answer was lost (a timeout, a reset, do interrupted or killed
    mid-request) and the answer after it (a 401, 403, a proxy's error page...) says nothing
    about it: that attempt may have taken effect, and a new key would do it a second time;
  - "expired": the retry horizon passed without a definitive answer;
  - a failed intent with an attempt whose answer was lost before the failure.
The error names the attempt whose answer was lost. Reconcile instead: --same-key puts an
unknown (or failed) intent back in the queue under its OWN key, so the server answers from
its idempotency store if that attempt took effect, or runs it once if not; then run
'idemkit run --until-done' with the credentials (-H). It is refused past the intent's
horizon (the server may have forgotten the key): check with the API itself. Only if you
know the request never took effect, --i-accept-double-charge retries it under a new key
anyway.

The new key is derived from the old one (KEY~retry1, KEY~retry2, ...), so retrying the same
failed intent twice re-queues it once. Nothing is sent: run 'idemkit run --until-done' with
the credential flags (-H) the original request had. Prints the new intent id (with --json:
the intent).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, qf, err := g.openExisting(cmd.Context(), e)
			if err != nil {
				return err
			}
			defer c.Close()
			old, err := find(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			abs, aerr := filepath.Abs(qf.path)
			if aerr != nil {
				abs = qf.path
			}
			host := ""
			if len(old.CredentialHeaders) > 0 {
				host = hostOf(old.URL)
			}
			if sameKey {
				in, err := c.Resend(cmd.Context(), old.ID)
				if err != nil {
					code := exitError
					if in != nil && (in.State == idemkit.StateUnknown || in.State == idemkit.StateFailed) {
						code = exitExpired
					}
					return &statusError{code: code, err: err}
				}
				if g.json {
					if err := writeJSON(e.stdout, toJSON(in)); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(e.stdout, in.ID)
				}
				fmt.Fprintf(e.stderr, "idemkit: %s is queued again under its own key %s (the server replays it if it took effect); send it with:\n  %s\n",
					in.ID, in.Key, resumeHint(abs, 0, host, old.CredentialHeaders))
				return nil
			}
			if err := refuseUnknown(cmd.Context(), c, old, acceptDouble); err != nil {
				return err
			}
			if old.State != idemkit.StateFailed && !(acceptDouble && (old.State == idemkit.StateUnknown || old.State == idemkit.StateExpired)) {
				return usagef("refusing to retry intent %s: it is %s; only failed intents can be retried", old.ID, old.State)
			}
			key := retryKey(old.Key)
			if in := retriedAs(cmd.Context(), c, old); in != nil {
				return usagef("intent %s was already retried as %s (%s)", old.ID, in.ID, summary(in))
			}
			if !yes {
				what := "no response"
				if old.Outcome != nil {
					what = statusText(old.Outcome.Status)
				}
				fmt.Fprintf(e.stderr, "Intent %s (%s %s) ended %s with %s.\nRe-queue it under the new key %s? Only if it never took effect. Type yes: ", old.ID, old.Method, old.URL, old.State, what, key)
				line, _ := bufio.NewReader(e.stdin).ReadString('\n')
				if strings.TrimSpace(line) != "yes" {
					return usagef("not confirmed: nothing queued")
				}
			}
			in, err := c.Submit(cmd.Context(), &idemkit.Request{Method: old.Method, URL: old.URL, Header: old.Header, Body: old.Body, Key: key})
			if err != nil {
				return err
			}
			if g.json {
				if err := writeJSON(e.stdout, toJSON(in)); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(e.stdout, in.ID)
			}
			fmt.Fprintf(e.stderr, "idemkit: queued as %s with key %s; send it with (the credentials the original was queued with are never stored: set them in the environment):\n  %s\n",
				in.ID, key, resumeHint(abs, 0, host, old.CredentialHeaders))
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask: I know the failed request never took effect")
	cmd.Flags().BoolVar(&sameKey, "same-key", false, "re-queue an unknown or failed intent under its own key (safe: the server replays it if it took effect)")
	cmd.Flags().BoolVar(&acceptDouble, "i-accept-double-charge", false, "retry under a new key even though an attempt's answer was lost (unknown, expired): if it took effect, it takes effect twice")
	return cmd
}

// refuseUnknown refuses to retry under a new key an intent whose outcome
// is unknown (unknown, expired, or failed after a lost answer), naming the
// attempt whose answer was lost, unless accept is set.
func refuseUnknown(ctx context.Context, c *idemkit.Client, in *idemkit.Intent, accept bool) error {
	if accept {
		return nil
	}
	var why, way string
	switch {
	case in.State == idemkit.StateExpired:
		why = "its outcome is unknown: it expired (the retry horizon passed without a definitive answer)"
		way = "check with the API whether it took effect (the server may no longer remember its key)"
	case in.State == idemkit.StateUnknown || (in.State == idemkit.StateFailed && in.Unanswered > 0):
		why = fmt.Sprintf("its outcome is unknown: %s, and the answer after it says nothing about it", lostAttempt(ctx, c, in))
		way = fmt.Sprintf("'idemkit retry --same-key %s' resends it under its own key (the server replays it if it took effect), or check with the API", shortID(in.ID))
	default:
		return nil
	}
	return &statusError{code: exitExpired, err: fmt.Errorf("refusing to retry intent %s under a new key: %s, so it may have taken effect and a new key would make it take effect twice. "+
		"Reconcile it: %s; only if you know it never took effect: 'idemkit retry --i-accept-double-charge %s'", in.ID, why, way, shortID(in.ID))}
}

// lostAttempt names the attempt of in whose answer was lost.
func lostAttempt(ctx context.Context, c *idemkit.Client, in *idemkit.Intent) string {
	n := in.Unanswered
	log, _ := c.Attempts(ctx, in.ID)
	for _, a := range log {
		if a.N != n {
			continue
		}
		what := "no answer"
		switch {
		case a.FinishedAt.IsZero():
			what = "no answer (the process stopped mid-attempt)"
		case a.Error != "":
			what = "no answer: " + a.Error
		}
		return fmt.Sprintf("attempt %d (started %s) got %s", n, fmtTime(a.StartedAt), what)
	}
	return fmt.Sprintf("attempt %d got no answer", n)
}

// retriedAs returns the intent that retried in (under retryKey), or nil.
func retriedAs(ctx context.Context, c *idemkit.Client, in *idemkit.Intent) *idemkit.Intent {
	key := retryKey(in.Key)
	all, _ := listAll(ctx, c, "") // damaged rows are left out
	for _, r := range all {
		if r.Key == key {
			return r
		}
	}
	return nil
}

// retryKey derives the key of the next retry from a failed intent's key:
// KEY~retry1, then KEY~retry2 for a retry of that one. A key too long for
// the suffix is replaced by its SHA-256.
func retryKey(key string) string {
	base, n := key, 1
	if i := strings.LastIndex(key, "~retry"); i >= 0 {
		if k, err := strconv.Atoi(key[i+len("~retry"):]); err == nil && k > 0 {
			base, n = key[:i], k+1
		}
	}
	suffix := fmt.Sprintf("~retry%d", n)
	if len(base)+len(suffix) > 255 {
		sum := sha256.Sum256([]byte(base))
		base = hex.EncodeToString(sum[:16])
	}
	return base + suffix
}
