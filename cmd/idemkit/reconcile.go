package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// reconcileExitHelp is the exit status section of reconcile's --help.
const reconcileExitHelp = `Exit status:
  0    every intent asked about is now succeeded (or none needed reconciling)
  1    usage error, or a local one (queue file, flags)
  3    an intent asked about is now failed (the server had stored a non-2xx answer)
  4    an intent's outcome is still unknown: the server is still processing it, has no
       record of it, or could not be asked (no lookup, no credential, network)
  130  SIGINT (Ctrl-C)`

// reconcileJSON is one line of reconcile --json: the intent afterwards,
// its state before, the lookup's answer and what to do.
type reconcileJSON struct {
	*intentJSON
	Was    string `json:"was"`
	Server string `json:"server"`
	Note   string `json:"note"`
	Error  string `json:"lookup_error,omitempty"`
}

func newReconcileCmd(e *env, g *globals) *cobra.Command {
	var (
		headers  []string
		host     string
		path     string
		endpoint string
	)
	cmd := &cobra.Command{
		Use:   "reconcile [ID...] [-H 'Authorization: Bearer x']... [--host H] [--path /v1/idempotency-keys/{key}]",
		Short: "Ask the server what became of intents whose outcome is unknown, and record it",
		Long: `reconcile asks the idemkit server's key status lookup (GET /v1/idempotency-keys/{key}
on the intent's host, package server/keystatus) about every intent that is "unknown" or
"expired", or about the intents named (by id, short id, prefix or key), and records what
the server knew, while it still has the record:

  completed    the intent ends succeeded (2xx) or failed, with the stored response as its
               outcome (marked replayed; the status alone if the server shows no body)
  in_progress  the request is still running on the server (or its process died and the
               claim was not taken over yet): the intent stays as it is; ask again later
  unknown      the server has no record of the key for these credentials: it never
               arrived, or failed and was released. An "unknown" intent can then be
               resent safely under its own key ('idemkit retry --same-key'); an
               "expired" one cannot (the record may have expired): check with the API

Each intent asked about is printed on stdout (a line, or with --json one JSON object).
Only hosts that speak the idemkit profile have the lookup; others are reported.

Headers given with -H are sent with the lookups and never stored: the credentials the
server scopes keys by (the lookup answers only about the caller's own keys). They go to
one host only: --host, else the host of the intents asked about if they all have the
same one (reconcile refuses to guess between several).

` + reconcileExitHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !strings.HasPrefix(path, "/") || strings.Count(path, "{key}") != 1 || strings.ContainsAny(path, "?#") {
				return usagef("--path %q: want an absolute path holding {key} once, without query", path)
			}
			h, err := parseHeaders(headers)
			if err != nil {
				return err
			}
			if _, ok := h["Idempotency-Key"]; ok {
				return usagef("-H Idempotency-Key: every intent has its own key")
			}
			var scope *hostScope // set before the first lookup
			logger := slog.New(slog.DiscardHandler)
			if g.verbose {
				logger = slog.New(slog.NewTextHandler(e.stderr, nil))
			}
			cfg := &idemkit.Config{Logger: logger, SendHookFunc: func(_ string, r *http.Request) error {
				if scope.covers(r.URL) {
					for k, v := range h {
						r.Header[k] = v
					}
				}
				return nil
			}}
			qf, err := g.queueFile(e)
			if err != nil {
				return err
			}
			c, err := qf.open(cmd.Context(), mustExist, cfg)
			if err != nil {
				return err
			}
			defer c.Close()

			opts := &idemkit.ReconcileOptions{LookupPath: path}
			if endpoint != "" {
				opts.EndpointFunc = func(*idemkit.Intent) string { return endpoint }
			}
			var targets []*idemkit.Intent
			for _, ref := range args {
				in, err := find(cmd.Context(), c, ref)
				if err != nil {
					return err
				}
				if in.State != idemkit.StateUnknown && in.State != idemkit.StateExpired {
					return usagef("intent %s is %s: only unknown and expired intents are reconciled", in.ID, in.State)
				}
				opts.IDs = append(opts.IDs, in.ID)
				targets = append(targets, in)
			}
			if len(args) == 0 {
				for _, s := range []idemkit.IntentState{idemkit.StateUnknown, idemkit.StateExpired} {
					list, err := listAll(cmd.Context(), c, s)
					if err != nil {
						return err
					}
					targets = append(targets, list...)
				}
				for _, in := range targets {
					opts.IDs = append(opts.IDs, in.ID)
				}
			}
			if len(targets) == 0 {
				fmt.Fprintln(e.stderr, "idemkit: no unknown or expired intent: nothing to reconcile")
				return nil
			}
			if len(h) > 0 {
				if scope, err = reconcileScope(host, targets); err != nil {
					return err
				}
			}
			got, err := c.Reconcile(cmd.Context(), opts)
			if err != nil && len(got) == 0 {
				return err
			}
			code := exitOK
			for _, r := range got {
				if err := printReconciled(e, g, r); err != nil {
					return err
				}
				switch r.Intent.State {
				case idemkit.StateSucceeded:
				case idemkit.StateFailed:
					code = max(code, exitFailed)
				default:
					code = exitExpired
				}
			}
			if err != nil {
				return err
			}
			if code != exitOK {
				return &statusError{code: code, err: errors.New("")}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, "header sent with the lookups to --host only, never stored (repeatable)")
	cmd.Flags().StringVar(&host, "host", "", "the host -H is sent to: https://api.example.com or api.example.com (default: the host of the intents asked about, if they share one)")
	cmd.Flags().StringVar(&path, "path", "/v1/idempotency-keys/{key}", "the lookup's path on the intent's host; {key} is replaced by the intent's key")
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "the operation name the server scopes the keys by, sent as ?endpoint= (default: none, the server looks under every operation it covers)")
	return cmd
}

// reconcileScope is where -H goes: --host, else the one host of the
// intents asked about.
func reconcileScope(flag string, targets []*idemkit.Intent) (*hostScope, error) {
	if flag != "" {
		return newHostScope(context.Background(), nil, flag)
	}
	var origins []string
	for _, in := range targets {
		if u, err := url.Parse(in.URL); err == nil && !slices.Contains(origins, originOf(u)) {
			origins = append(origins, originOf(u))
		}
	}
	if len(origins) > 1 {
		slices.Sort(origins)
		return nil, usagef("-H: the intents to reconcile are for %d hosts (%s): give --host to say which one gets the headers (or name the intents)", len(origins), strings.Join(origins, ", "))
	}
	s := &hostScope{warned: map[string]bool{}}
	if len(origins) == 1 {
		s.origin = origins[0]
	}
	return s, nil
}

// printReconciled prints one intent's reconciliation.
func printReconciled(e *env, g *globals, r *idemkit.Reconciliation) error {
	if g.json {
		j := &reconcileJSON{intentJSON: toJSON(r.Intent), Was: string(r.Was), Server: r.Server, Note: r.Note}
		if r.Err != nil {
			j.Error = r.Err.Error()
		}
		return writeJSON(e.stdout, j)
	}
	server := r.Server
	if server == "" {
		server = "not asked"
	}
	fmt.Fprintf(e.stdout, "%s  %s -> %s  server: %s  %s\n", shortID(r.Intent.ID), r.Was, r.Intent.State, server, r.Note)
	return nil
}
