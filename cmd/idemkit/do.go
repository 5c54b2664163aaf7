package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func newDoCmd(e *env, g *globals) *cobra.Command {
	var (
		rf requestFlags
		sf sendFlags
	)
	cmd := &cobra.Command{
		Use:   "do --url URL [--method POST] [-H 'Name: value']... [--data STRING|@FILE] [--key KEY]",
		Short: "Submit one request and send it until it has an outcome",
		Long: `do persists the request as an intent, sends it, and retries it with the same key until
the server answers definitively. The response body goes to stdout (with --json: the intent,
its attempt log and its outcome, body included); a summary line goes to stderr:

  idemkit: succeeded 201 Created, replayed=false, attempts=1, id=..., key=...

replayed=true means the server answered from its idempotency store: the effect happened
once, on an earlier attempt, and was not repeated. Retries are reported on stderr as they
happen (-v: every attempt). Credentials given with -H are used for this run only and never
stored. If do is interrupted or stopped by --timeout or --max-attempts, the intent stays
queued and do prints the 'idemkit run' command that finishes it with the same key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := sf.validate(); err != nil {
				return err
			}
			req, err := rf.request(cmd.InOrStdin())
			if err != nil {
				return err
			}
			qf, err := g.queueFile(e)
			if err != nil {
				return err
			}
			ctx, cancel := sf.context(cmd.Context())
			defer cancel()
			t := newTracker(e.stderr, g.verbose, true, sf.maxAttempts)
			var exhausted context.CancelCauseFunc
			ctx, exhausted = context.WithCancelCause(ctx)
			defer exhausted(nil)
			t.onExhausted = func(string) { exhausted(errMaxAttempts{sf.maxAttempts}) }
			abs, aerr := filepath.Abs(qf.path)
			if aerr != nil {
				abs = qf.path
			}
			// What a second signal, which exits at once, still prints.
			hint := resumeHint(abs, sf.window, hostOf(req.URL), credentialsIn(req.Header))
			e.setLastWords(func() string {
				return "interrupted again before the first attempt was recorded: if it was queued, 'idemkit ls' shows it; resume (same key) with:\n  " + hint
			})
			t.onStarted = func(id string) {
				e.setLastWords(func() string {
					return fmt.Sprintf("interrupted again: intent %s stays queued (its attempt may have reached the server); resume it (same key) with:\n  %s", id, hint)
				})
			}
			c, err := qf.open(cmd.Context(), mayCreate, sf.config(t, nil))
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now().Truncate(time.Millisecond)
			in, err := c.Do(ctx, req)
			if in == nil {
				if errors.Is(err, idemkit.ErrKeyReused) {
					return fmt.Errorf("--key %s is already in the queue with a different request (nothing sent): %w", req.Key, err)
				}
				if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
					// --timeout ended before the intent was written: nothing to resume.
					return &statusError{code: exitError, err: fmt.Errorf("%s before the intent was queued (the queue file was slow to write): nothing was sent or queued; run the command again", cause)}
				}
				return err
			}
			if in.State == idemkit.StatePending {
				why := "interrupted"
				if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
					why = cause.Error()
				}
				if ctx.Err() == nil && err != nil {
					why = err.Error()
				}
				if errors.Is(err, idemkit.StatePending) {
					why = errMaxAttempts{sf.maxAttempts}.Error()
				}
				if g.json {
					if jerr := printIntent(cmd, c, in, true); jerr != nil {
						return jerr
					}
				}
				if log, lerr := c.Attempts(context.WithoutCancel(ctx), in.ID); lerr == nil {
					in = withAttemptError(in, log)
				}
				msg := fmt.Errorf("%s: %s\nidemkit: the intent stays queued; resume it (same key) with:\n  %s",
					why, summary(in), resumeHint(abs, sf.window, hostOf(in.URL), in.CredentialHeaders))
				e.sayInstead(msg)
				return &statusError{code: exitInterrupted, err: errors.New("")} // said
			}
			if g.json {
				if jerr := printIntent(cmd, c, in, true); jerr != nil {
					return jerr
				}
			} else if in.Outcome != nil {
				body := in.Outcome.Body
				if e.stdoutTTY && len(body) > 0 && body[len(body)-1] != '\n' {
					body = append(body[:len(body):len(body)], '\n') // the summary line starts on its own line
				}
				if _, werr := e.stdout.Write(body); werr != nil {
					return werr
				}
			}
			if code := resultCode(in); code != exitOK {
				return &statusError{code: code, err: errors.New(earlier(in, start) + summary(in))}
			}
			fmt.Fprintln(e.stderr, "idemkit: "+earlier(in, start)+summary(in))
			return nil
		},
	}
	rf.register(cmd)
	sf.register(cmd)
	return cmd
}

// earlier is the prefix of the summary of an intent that ended before
// this command started: answered from the local queue, nothing sent.
func earlier(in *idemkit.Intent, start time.Time) string {
	if in.UpdatedAt.Before(start) {
		return "already ended in the queue (nothing sent now): "
	}
	return ""
}

// printIntent prints an intent on stdout: JSON (full: with the request,
// outcome and attempt log) or the summary line.
func printIntent(cmd *cobra.Command, c *idemkit.Client, in *idemkit.Intent, full bool) error {
	w := cmd.OutOrStdout()
	if !full {
		return writeJSON(w, toJSON(in))
	}
	log, err := c.Attempts(context.WithoutCancel(cmd.Context()), in.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, toFullJSON(in, log))
}

// hostOf is the origin (scheme://host[:port]) of a URL, "" if it does not
// parse.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return originOf(u)
}
