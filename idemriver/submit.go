package idemriver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/wire"
)

// maxBodySize bounds request and response bodies, as in package idemkit.
const maxBodySize = policy.MaxBodySize

// jobMaxAttempts is the River MaxAttempts of an intent's job. Retries are
// snoozes, which River does not count; only worker deaths and database
// errors do. The horizon and MaxAttemptsPerHour bound the HTTP attempts.
const jobMaxAttempts = 1000

// ErrInvalidRequest means a Request was refused before it was queued: a bad
// method or URL, credentials in the URL, an invalid header or key, a body
// over 10 MiB. Nothing is written.
// It is idemkit.ErrInvalidRequest.
var ErrInvalidRequest = policy.ErrInvalidRequest

func invalidf(format string, args ...any) error { return policy.Invalidf(format, args...) }

// Submit is SubmitTx in a transaction of its own: when it returns, the intent
// is committed and nothing has been sent.
func (c *Client) Submit(ctx context.Context, req *Request) (*Intent, error) {
	var in *Intent
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		in, err = c.SubmitTx(ctx, tx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// SubmitTx validates req, mints its key (unless req.Key or an Idempotency-Key
// header gives one) and inserts the intent as a River job within the
// caller's transaction: it commits or rolls back with the caller's own
// writes (the transactional outbox), and no worker sees it before the commit.
// Credential headers of req are dropped (their names are kept): supply them
// with Config.SendHookFunc. Returns ErrInvalidRequest for a request that
// cannot be queued.
func (c *Client) SubmitTx(ctx context.Context, tx pgx.Tx, req *Request) (*Intent, error) {
	args, err := c.prepare(req)
	if err != nil {
		return nil, err
	}
	opts := &river.InsertOpts{Queue: c.cfg.Queue, MaxAttempts: jobMaxAttempts}
	if args.Key != args.ID {
		// A caller's key: one intent per key, whatever its state (a minted
		// key is unique by construction, and pays no uniqueness check).
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true, ByState: allJobStates}
	}
	res, err := c.river.InsertTx(ctx, tx, args, opts)
	if err != nil {
		return nil, fmt.Errorf("idemriver: insert intent: %w", err)
	}
	in, err := intentOf(res.Job)
	if err != nil || !res.UniqueSkippedAsDuplicate {
		return in, err
	}
	if in.Method != args.Method || in.URL != args.URL || !bytes.Equal(in.Body, args.Body) {
		return nil, fmt.Errorf("%w: intent %s has key %q with another request", ErrKeyReused, in.ID, args.Key)
	}
	return in, nil
}

// ErrKeyReused is returned by Submit and SubmitTx when a caller-supplied key
// is already the key of an intent with a different request (method, URL or
// body); with the same request they return that intent. An intent that ends
// failed because the server said its key was reused has an Outcome with
// KeyReused set.
//
//	if errors.Is(err, idemriver.ErrKeyReused) { /* a bug in the caller: one key per intent */ }
var ErrKeyReused = errors.New("idemriver: idempotency key reused with a different request")

// allJobStates makes a caller's key unique among the intents in every state.
var allJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted, rivertype.JobStateDiscarded,
	rivertype.JobStatePending, rivertype.JobStateRetryable, rivertype.JobStateRunning, rivertype.JobStateScheduled,
}

// prepare turns a Request into the job args, as stored.
func (c *Client) prepare(req *Request) (*intentArgs, error) {
	if req == nil {
		return nil, invalidf("nil request")
	}
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	if !wire.ValidToken(method) {
		return nil, invalidf("method %q", method)
	}
	u, err := url.Parse(req.URL)
	switch {
	case err != nil:
		return nil, invalidf("URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, invalidf("URL %q: scheme must be http or https", redactURL(req.URL))
	case u.Host == "":
		return nil, invalidf("URL %q: no host", redactURL(req.URL))
	case u.User != nil:
		return nil, invalidf("URL: user:password@ would be stored; add credentials in Config.SendHookFunc")
	}
	if err := c.checkQuery(u); err != nil {
		return nil, err
	}
	if len(req.Body) > maxBodySize {
		return nil, invalidf("body of %d bytes is over 10 MiB", len(req.Body))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("idemriver: mint id: %w", err)
	}
	_, hookHost := hostOf(req.URL)
	prof := c.profileFor(hookHost)
	args := &intentArgs{ID: id.String(), Method: method, URL: req.URL, Body: req.Body, Header: http.Header{}}
	key := req.Key
	for name, vs := range req.Header {
		if !wire.ValidToken(name) {
			return nil, invalidf("header name %q", name)
		}
		cn := http.CanonicalHeaderKey(name)
		switch {
		case cn == http.CanonicalHeaderKey(wire.HeaderKey), cn == http.CanonicalHeaderKey(prof.KeyHeader):
			if key == "" && len(vs) > 0 {
				key = vs[0]
			}
		case policy.HeaderMatches(c.cfg.CredentialHeaders, cn):
			args.CredentialHeaders = append(args.CredentialHeaders, cn)
		default:
			for _, v := range vs {
				if !validHeaderValue(v) {
					return nil, invalidf("header %s: invalid value", cn)
				}
			}
			args.Header[cn] = append(args.Header[cn], vs...)
		}
	}
	slices.Sort(args.CredentialHeaders)
	if key == "" {
		key = args.ID
	}
	if err := policy.CheckKey(prof, key, prof.KeyQuoted); err != nil {
		return nil, err
	}
	args.Key, args.KeyQuoted = key, prof.KeyQuoted
	return args, nil
}

// validHeaderValue reports whether v can be sent as a header value: no
// control characters but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// checkQuery refuses credentials in the URL query, which would be stored.
func (c *Client) checkQuery(u *url.URL) error {
	if c.cfg.AllowURLCredentials {
		return nil
	}
	name, err := policy.QueryCredential(u.RawQuery)
	if err != nil {
		return invalidf("URL query: %v", err)
	}
	if name != "" {
		return invalidf("URL query parameter %q looks like a credential and would be stored; add it in Config.SendHookFunc, or set Config.AllowURLCredentials", name)
	}
	return nil
}

// redactURL is u without its query and user info, for errors and logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	return u.String()
}
