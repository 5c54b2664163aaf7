package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit/internal/conform"
)

// Exit statuses of check (besides exitOK, exitError and exitSIGINT).
const (
	exitCheckFailed    = 3 // a property failed
	exitCheckUndecided = 4 // no property failed, but a required one could not be told
)

// checkExitHelp documents check's exit statuses in its --help.
const checkExitHelp = `Exit status:
  0    every required property passed and none failed
  1    usage error, or a local one (flags, --data file, --junit file)
  3    a property failed
  4    no property failed, but a required one could not be told (the first request was not
       accepted, the API did not answer, or --max-requests ran out)
  130  SIGINT (Ctrl-C)`

// checkFlags are check's flags.
type checkFlags struct {
	url         string
	method      string
	headers     []string
	data        string
	asOther     []string
	errorData   string
	profile     string
	junit       string
	maxRequests int
	concurrency int
	idField     string
	maxWait     time.Duration
	dryRun      bool
}

func newCheckCmd(e *env, g *globals) *cobra.Command {
	var f checkFlags
	cmd := &cobra.Command{
		Use:   "check --url URL --data BODY [-H 'Name: value']... [--as-other 'Name: value']... [--profile NAME] [--junit FILE] [--max-requests N] [--dry-run]",
		Short: "Tell whether an API's idempotency holds: a bounded battery of requests to one endpoint",
		Long: `check sends a small, documented battery of requests to one endpoint and reports, for each
property of idempotency, pass, fail or cannot tell, with the requests and answers that decided
it. Every property uses keys of its own (fresh UUIDs); each accepted request may execute (a
test payment, say), so point it at a staging API or a sandbox.

  replay         (required) the request, then the same key and body again: the same status
                 and body bytes, with a replay marker (Idempotent-Replayed or another common
                 spelling; required by the idemkit and stripe profiles)
  window         the retention window: Idempotency-Window on those answers, else the window
                 the profile documents; the idemkit profile requires the header
  changed-body   (required) the request, then the same key with a changed body: refused (422,
                 or the profile's key-reused answer; any 4xx where the profile documents none),
                 never a replay. The body is changed thus: in JSON, the first number in document
                 order gets 1 added ({"amount": 4000} becomes 4001); with no number, the first
                 string value gets "-changed" appended; in a form (amount=4000&currency=usd),
                 the first integer value gets 1 added; any other body gets "-changed" appended
  concurrent     (required) --concurrency copies at once, then the same request again: one
                 execution, judged from the answers (one distinct --id-field among the 2xx
                 answers, the JSON "id" by default, else the whole body)
  in-flight      the non-2xx answers to those copies are 409 (or the profile's in-progress
                 answer) with Retry-After; cannot tell when no copy overlapped the first one
  scoped         (required with --as-other) the request as the first caller, then the same key
                 and body as the second (--as-other headers replace the same-named -H headers):
                 a new request, never the first caller's answer, a 409 or a 422
  hostile-keys   (required) an empty key, a key one byte over the profile's limit, a key with
                 U+0001, the key header twice (sent as raw HTTP/1.1): 4xx each, never a 5xx or
                 an execution
  error-storage  with --error-data (a body the API refuses): sent twice with one key; a 5xx
                 must not be stored and replayed (a 4xx may be)

It sends at most --max-requests requests (30 by default; the battery needs 9 plus
--concurrency, 14 by default, plus 2 with --as-other, 2 with --error-data and up to 2 retries
of the concurrent property while answered in flight), only to --url: redirects are reported,
never followed. Properties the budget does not reach are "cannot tell". --dry-run prints the
plan and sends nothing. The report is a table on stdout (-v: with the evidence of every
property, else of those that did not pass), --json prints it as one JSON object, --junit FILE
writes JUnit XML for CI (a failed or undecided required property is a failure, an undecided
optional one is skipped).

  idemkit check --url http://127.0.0.1:8080/v1/payments \
    -H 'Authorization: Bearer alice' -H 'Content-Type: application/json' \
    --data '{"amount": 4000, "currency": "USD"}' --as-other 'Authorization: Bearer bob'

` + checkExitHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(e)
			if err != nil {
				return err
			}
			if f.dryRun {
				if err := conform.WritePlan(e.stdout, cfg); err != nil {
					return usagef("%s", strings.TrimPrefix(err.Error(), conform.ErrConfig.Error()+": "))
				}
				return nil
			}
			rep, err := conform.Run(cmd.Context(), cfg)
			if err != nil {
				return usagef("%s", strings.TrimPrefix(err.Error(), conform.ErrConfig.Error()+": "))
			}
			if f.junit != "" {
				if err := writeJUnitFile(e.stdout, f.junit, rep); err != nil {
					return &statusError{code: exitError, err: fmt.Errorf("--junit: %w", err)}
				}
			}
			if g.json {
				err = writeJSON(e.stdout, rep)
			} else {
				err = conform.WriteText(e.stdout, rep, g.verbose)
			}
			if err != nil {
				return err
			}
			switch {
			case rep.Failed():
				return &statusError{code: exitCheckFailed, err: errors.New("check: " + conform.Summary(rep))}
			case rep.Undecided():
				return &statusError{code: exitCheckUndecided, err: errors.New("check: " + conform.Summary(rep))}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "", "the endpoint (required); nothing else is ever contacted")
	fl.StringVarP(&f.method, "method", "X", "POST", "request method")
	fl.StringArrayVarP(&f.headers, "header", "H", nil, "request header 'Name: value' of the first caller (repeatable): credentials, Content-Type")
	fl.StringVarP(&f.data, "data", "d", "", "request body the API accepts (2xx): a string, @FILE, or @- for stdin")
	fl.StringArrayVar(&f.asOther, "as-other", nil, "header 'Name: value' of a second caller, replacing the same-named -H header (repeatable); without it, scoping cannot be told")
	fl.StringVar(&f.errorData, "error-data", "", "a request body the API refuses (a string or @FILE): tells whether errors are stored")
	fl.StringVar(&f.profile, "profile", "idemkit", "the API's idempotency dialect: "+strings.Join(conform.DialectNames, ", "))
	fl.StringVar(&f.junit, "junit", "", "write the report as JUnit XML to FILE (- for stdout)")
	fl.IntVar(&f.maxRequests, "max-requests", conform.MaxRequestsDefault, "send at most N requests")
	fl.IntVar(&f.concurrency, "concurrency", conform.ConcurrencyDefault, "copies sent at once for the concurrent property (2 to 64)")
	fl.StringVar(&f.idField, "id-field", "id", "top-level JSON member of a 2xx answer naming the resource made")
	fl.DurationVar(&f.maxWait, "max-wait", conform.MaxWaitDefault, "longest Retry-After to wait before a retry")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan and send nothing")
	return cmd
}

// config turns the flags into the battery's Config.
func (f *checkFlags) config(e *env) (*conform.Config, error) {
	if f.url == "" {
		return nil, usagef("--url is required")
	}
	if f.maxRequests < 1 {
		return nil, usagef("--max-requests %d: want at least 1", f.maxRequests)
	}
	if f.concurrency < 2 || f.concurrency > 64 {
		return nil, usagef("--concurrency %d: want 2 to 64", f.concurrency)
	}
	if f.maxWait < 0 {
		return nil, usagef("--max-wait %v: must not be negative", f.maxWait)
	}
	h, err := parseHeaders(f.headers)
	if err != nil {
		return nil, err
	}
	body, err := readData(f.data, e.stdin)
	if err != nil {
		return nil, &statusError{code: exitError, err: err}
	}
	cfg := &conform.Config{
		Method: f.method, URL: f.url, Header: h, Body: body, Dialect: f.profile, IDField: f.idField,
		Concurrency: f.concurrency, MaxRequests: f.maxRequests, MaxWait: max(f.maxWait, time.Millisecond),
	}
	if len(f.asOther) > 0 {
		if cfg.OtherHeader, err = parseHeaders(f.asOther); err != nil {
			return nil, err
		}
	}
	if f.errorData != "" {
		if strings.HasPrefix(f.errorData, "@-") {
			return nil, usagef("--error-data: @- is not allowed (stdin is for --data)")
		}
		if cfg.ErrorBody, err = readData(f.errorData, e.stdin); err != nil {
			return nil, &statusError{code: exitError, err: fmt.Errorf("--error-data: %w", err)}
		}
	}
	return cfg, nil
}

// writeJUnitFile writes the JUnit report to path ("-": stdout).
func writeJUnitFile(stdout io.Writer, path string, rep *conform.Report) error {
	if path == "-" {
		return conform.WriteJUnit(stdout, rep)
	}
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := conform.WriteJUnit(fh, rep); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
