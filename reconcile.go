package idemkit

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/queue"
	"github.com/idemkit/idemkit/internal/wire"
)

// ErrNoLookup means an intent's host offers no key status lookup that
// [Client.Reconcile] can ask: its [Profile] is not "idemkit" (Stripe,
// Adyen and the others publish none), or the lookup URL answered 404 or
// 405, or something that is not a lookup's answer. The intent is left as
// it was; reconcile it with the API's own means.
var ErrNoLookup = errors.New("idemkit: the host has no idempotency-key status lookup")

// lookupPathDefault is ReconcileOptions.LookupPath's default: where the
// payments example mounts package server/keystatus.
const lookupPathDefault = "/v1/idempotency-keys/{key}"

// maxLookupBytes bounds a lookup's answer: a stored body of up to 10 MiB,
// in base64, and its headers.
const maxLookupBytes = 16 << 20

// ReconcileOptions configures [Client.Reconcile]. The zero value asks
// about every unknown and expired intent at /v1/idempotency-keys/{key}.
type ReconcileOptions struct {
	// IDs, if not empty, are the only intents asked about (each must be
	// in one of States; others are reported with an error). Defaults to
	// every intent in States.
	IDs []string

	// States are the states whose intents are asked about: only
	// StateUnknown and StateExpired may be given. Defaults to both:
	//
	//   - StateUnknown: an answer was lost and a later one said nothing.
	//   - StateExpired: the client's horizon passed without an answer. The
	//     horizon ends a safety margin before the server's window, so the
	//     record is usually still there: "completed" settles the intent.
	//     "unknown" is not a "no" for an expired intent: the record may
	//     have expired, so resending is not safe and the intent stays
	//     expired.
	States []IntentState

	// LookupPath is the lookup's path on the intent's host (its scheme,
	// host and port): "{key}" is replaced by the intent's key, escaped as
	// a path segment. Defaults to /v1/idempotency-keys/{key}, where the
	// payments example mounts package server/keystatus; a server that
	// mounts it elsewhere, or under a prefix, sets its path here.
	LookupPath string

	// EndpointFunc, if set, returns the operation name the server scopes
	// the intent's key by (as server.Operation names it), sent as
	// ?endpoint=; "" sends none. Defaults to nil: the server looks the key
	// up under every operation it covers.
	EndpointFunc func(in *Intent) string
}

// withDefaults returns a copy of o (which may be nil) with defaults.
func (o *ReconcileOptions) withDefaults() *ReconcileOptions {
	out := &ReconcileOptions{}
	if o != nil {
		*out = *o
	}
	if len(out.States) == 0 {
		out.States = []IntentState{StateUnknown, StateExpired}
	}
	if out.LookupPath == "" {
		out.LookupPath = lookupPathDefault
	}
	return out
}

func (o *ReconcileOptions) validate() error {
	for _, s := range o.States {
		if s != StateUnknown && s != StateExpired {
			return fmt.Errorf("idemkit: ReconcileOptions.States: %q cannot be reconciled (only unknown and expired)", s)
		}
	}
	if !strings.HasPrefix(o.LookupPath, "/") || strings.Count(o.LookupPath, "{key}") != 1 || strings.ContainsAny(o.LookupPath, "?#") {
		return fmt.Errorf("idemkit: ReconcileOptions.LookupPath %q: want an absolute path holding {key} once, without query", o.LookupPath)
	}
	return nil
}

// Server statuses of a [Reconciliation], as the lookup spells them.
const (
	lookupInProgress = "in_progress"
	lookupCompleted  = "completed"
	lookupUnknown    = "unknown"
)

// Reconciliation is what [Client.Reconcile] learned about one intent.
type Reconciliation struct {
	// Intent is the intent afterwards, as stored.
	Intent *Intent
	// Was is its state before.
	Was IntentState
	// Server is the lookup's answer: "completed" (the intent now holds the
	// stored outcome: succeeded for a 2xx, failed otherwise), "in_progress"
	// (the request still runs on the server, or its process died and the
	// server has not taken the claim over yet: ask again later),
	// "unknown" (the server has no record under the intent's credentials:
	// see Note), or "" when the lookup could not be asked (Err).
	Server string
	// Note says, for a person, what the server knew and what to do next.
	Note string
	// Err is why the lookup failed: ErrNoLookup, a transport error, a
	// refusal (401, 403, 5xx). The intent is unchanged.
	Err error
}

// Reconcile asks the key status lookup of each intent's host (package
// server/keystatus, mounted at opts.LookupPath) what became of intents
// whose outcome is unknown (by default StateUnknown and StateExpired) and
// records what the server knew, while it still has the record:
//
//   - completed, with the stored response shown: the intent ends
//     succeeded (2xx) or failed (other statuses) with that response as its
//     Outcome, marked Replayed (the effect happened once, on an earlier
//     attempt), and its LastError says it was reconciled.
//   - completed, response not shown (the server shows the status only):
//     the same, with the status and an empty body.
//   - in_progress: the intent stays as it is. Ask again later, or
//     Resend it: under the same key the server answers 409 while the
//     request runs, then replays it (or takes a lapsed claim over).
//   - unknown: the intent stays as it is. For StateUnknown, within the
//     window, the server has no record of the key: it never arrived, or
//     it failed and was released. Resending under the same key
//     ([Client.Resend]) is then safe: it runs once, or replays whatever
//     arrives meanwhile. For StateExpired, the record may have expired:
//     not safe.
//
// Only hosts whose [Profile] is "idemkit" have a lookup: the URL is the
// intent's scheme, host and port with opts.LookupPath; an intent for any
// other host is reported with ErrNoLookup. Credentials come from the
// credential headers this process holds for the intent and from
// Config.SendHookFunc (called with the intent's host and the lookup
// request), exactly as for an attempt; nothing is stored. The lookup is a
// GET, sent once per intent with Config.HTTPClient and AttemptTimeout,
// never retried.
//
// It returns one Reconciliation per intent asked about, in queue order. A
// lookup that fails is reported in its Reconciliation, not as the error;
// the error is for the queue (reading it, or an invalid opts) and for
// ctx, which bounds the whole call: a canceled ctx stops it, returning
// what was done so far.
func (c *Client) Reconcile(ctx context.Context, opts *ReconcileOptions) ([]*Reconciliation, error) {
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.wg.Done()
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	intents, err := c.toReconcile(ctx, o)
	if err != nil {
		return nil, err
	}
	out := make([]*Reconciliation, 0, len(intents))
	for _, in := range intents {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		out = append(out, c.reconcileOne(ctx, o, in))
	}
	return out, nil
}

// toReconcile returns the intents opts asks about.
func (c *Client) toReconcile(ctx context.Context, o *ReconcileOptions) ([]*Intent, error) {
	if len(o.IDs) > 0 {
		out := make([]*Intent, 0, len(o.IDs))
		for _, id := range o.IDs {
			in, err := c.get(ctx, id)
			if err != nil {
				return nil, err
			}
			out = append(out, in)
		}
		return out, nil
	}
	counts, err := c.counts(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Intent
	for _, s := range o.States {
		if counts[s] == 0 {
			continue
		}
		list, err := c.q.List(ctx, &queue.ListOptions{State: queue.State(s), Limit: counts[s]})
		if err != nil {
			return nil, err
		}
		for _, qi := range list {
			out = append(out, intentOf(qi))
		}
	}
	slices.SortStableFunc(out, func(a, b *Intent) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// lookupAnswer is the JSON a server/keystatus lookup answers.
type lookupAnswer struct {
	Key            string          `json:"key"`
	Status         string          `json:"status"`
	Endpoint       string          `json:"endpoint"`
	AgeSeconds     *int64          `json:"age_seconds"`
	ResponseStatus int             `json:"response_status"`
	Response       *lookupResponse `json:"response"`
}

type lookupResponse struct {
	Status      int         `json:"status"`
	Headers     http.Header `json:"headers"`
	BodyBase64  string      `json:"body_base64"`
	BodyOmitted bool        `json:"body_omitted"`
}

// reconcileOne asks about one intent and records the answer.
func (c *Client) reconcileOne(ctx context.Context, o *ReconcileOptions, in *Intent) *Reconciliation {
	rec := &Reconciliation{Intent: in, Was: in.State}
	fail := func(err error) *Reconciliation {
		rec.Err = err
		rec.Note = "not reconciled: " + err.Error()
		return rec
	}
	if !slices.Contains(o.States, in.State) {
		return fail(fmt.Errorf("idemkit: intent %s is %s; only %v intents are reconciled", in.ID, in.State, o.States))
	}
	prof := c.cfg.profileFor(in.URL)
	if prof.Name != "idemkit" {
		return fail(fmt.Errorf("%w: %s speaks the %q profile", ErrNoLookup, hostOf(in.URL), prof.Name))
	}
	a, err := c.lookup(ctx, o, in)
	if err != nil {
		return fail(err)
	}
	rec.Server = a.Status
	switch a.Status {
	case lookupInProgress:
		age := ""
		if a.AgeSeconds != nil {
			age = fmt.Sprintf(", claimed %ds ago", *a.AgeSeconds)
		}
		rec.Note = "the server is still processing the key" + age + " (or its process died and the claim has not been taken over yet): ask again later, or resend under the same key (the server answers 409 while it runs, then replays it or takes the lapsed claim over)"
		return rec
	case lookupUnknown:
		if in.State == StateExpired {
			rec.Note = "the server has no record of the key: it never arrived, failed and was released, or its record expired; the intent is past its horizon, so resending it could take effect twice: check with the API"
		} else {
			rec.Note = "the server has no record of the key (it never arrived, or it failed and was released): resending it under the same key is safe within the window (idemkit retry / Client.Resend)"
		}
		return rec
	}
	// completed
	out := &Outcome{Status: a.ResponseStatus, Header: http.Header{}, Body: []byte{}, Replayed: true}
	shown := "the response was not shown"
	if a.Response != nil {
		body, err := base64.StdEncoding.DecodeString(a.Response.BodyBase64)
		if err != nil {
			return fail(fmt.Errorf("%w: the stored body is not base64: %v", ErrNoLookup, err))
		}
		out.Status, out.Header, out.Body = a.Response.Status, a.Response.Headers, body
		if out.Header == nil {
			out.Header = http.Header{}
		}
		if a.Response.BodyOmitted {
			out.Header.Set(wire.HeaderOmitted, "true")
		}
		shown = "its stored response is the outcome"
	}
	if out.Status < 100 || out.Status > 999 {
		return fail(fmt.Errorf("%w: stored status %d out of range", ErrNoLookup, out.Status))
	}
	state := StateFailed
	if out.Status >= 200 && out.Status < 300 {
		state = StateSucceeded
	}
	lastErr := fmt.Sprintf("reconciled: the server's idempotency record says the request completed with %d (%s)", out.Status, shown)
	if len(out.Body) > maxBodySize {
		out.Body = out.Body[:maxBodySize]
		lastErr += "; response body cut at 10 MiB"
	}
	ok, err := c.q.Reconcile(context.WithoutCancel(ctx), in.ID, queue.State(in.State), queue.State(state), storedOutcome(c.cfg.keptOutcome(out, prof, true)), lastErr, c.now())
	if err != nil {
		return fail(err)
	}
	got, gerr := c.get(context.WithoutCancel(ctx), in.ID)
	if gerr == nil {
		rec.Intent = got
	}
	if !ok {
		rec.Note = fmt.Sprintf("the server says the request completed with %d, but the intent changed meanwhile (now %s): nothing recorded", out.Status, rec.Intent.State)
		return rec
	}
	if gerr == nil {
		c.ended(got)
	}
	rec.Note = fmt.Sprintf("the request had completed on the server with %d: the intent is %s", out.Status, state)
	return rec
}

// lookup sends the lookup of in and decodes its 200 answer.
func (c *Client) lookup(ctx context.Context, o *ReconcileOptions, in *Intent) (*lookupAnswer, error) {
	u, err := url.Parse(in.URL)
	if err != nil {
		return nil, fmt.Errorf("idemkit: intent URL: %w", err)
	}
	lu := &url.URL{Scheme: u.Scheme, Host: u.Host}
	lu.Path = strings.Replace(o.LookupPath, "{key}", in.Key, 1)
	lu.RawPath = strings.Replace(o.LookupPath, "{key}", url.PathEscape(in.Key), 1)
	if o.EndpointFunc != nil {
		if ep := o.EndpointFunc(in); ep != "" {
			lu.RawQuery = url.Values{"endpoint": {ep}}.Encode()
		}
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, lu.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range c.credsFor(in.ID) {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.SendHookFunc != nil {
		if err := c.cfg.SendHookFunc(strings.ToLower(u.Host), req); err != nil {
			return nil, fmt.Errorf("idemkit: lookup of %s: the send hook refused it: %w", redact(lu.String()), err)
		}
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("idemkit: lookup of %s: %s", redact(lu.String()), policy.RedactError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLookupBytes+1))
	if err != nil {
		return nil, fmt.Errorf("idemkit: lookup of %s: reading the answer: %s", redact(lu.String()), policy.RedactError(err))
	}
	where := redact(lu.String())
	switch {
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return nil, fmt.Errorf("%w: %s answered %d", ErrNoLookup, where, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("idemkit: lookup of %s: %s", where, policy.Describe(resp, nil))
	case len(body) > maxLookupBytes:
		return nil, fmt.Errorf("idemkit: lookup of %s: the answer is larger than %d bytes", where, maxLookupBytes)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, fmt.Errorf("%w: %s answered 200 %s, not a lookup's JSON", ErrNoLookup, where, mt)
	}
	var a lookupAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%w: %s answered JSON that is not a lookup's: %v", ErrNoLookup, where, err)
	}
	if a.Key != in.Key {
		return nil, fmt.Errorf("%w: %s answered about another key", ErrNoLookup, where)
	}
	switch a.Status {
	case lookupInProgress, lookupUnknown:
	case lookupCompleted:
		if a.ResponseStatus == 0 && a.Response == nil {
			return nil, fmt.Errorf("%w: %s answered completed without a status", ErrNoLookup, where)
		}
	default:
		return nil, fmt.Errorf("%w: %s answered status %q", ErrNoLookup, where, a.Status)
	}
	return &a, nil
}
