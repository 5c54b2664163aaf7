package idemkit

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// IntentState is the state of an [Intent].
type IntentState string

const (
	// StatePending: no definitive answer yet. The intent is due at
	// NextAttemptAt (or is being sent by some process right now).
	StatePending IntentState = "pending"
	// StateSucceeded: the server answered 2xx, fresh or replayed.
	StateSucceeded IntentState = "succeeded"
	// StateFailed: a definitive answer that is not a success: a replayed
	// error, or a 4xx that is not retried ("key reused" included).
	StateFailed IntentState = "failed"
	// StateExpired: the horizon passed without a definitive answer. The
	// outcome is unknown and needs reconciliation.
	StateExpired IntentState = "expired"
	// StateCanceled: canceled by the caller before a definitive answer.
	StateCanceled IntentState = "canceled"
)

func (s IntentState) valid() bool {
	switch s {
	case StatePending, StateSucceeded, StateFailed, StateExpired, StateCanceled:
		return true
	}
	return false
}

// maxBodySize is the largest request body a [Request] may carry (10 MiB).
// Larger bodies are refused with [ErrInvalidRequest]; the stored response
// body of an Outcome is cut at the same size.
const maxBodySize = 10 << 20

// Request is what the caller wants sent, once, with one key.
type Request struct {
	// Method defaults to POST.
	Method string
	// URL must be absolute http or https, without user:password@.
	URL string
	// Header is sent with every attempt. Headers named in
	// Config.CredentialHeaders are never stored: this process keeps them in
	// memory for as long as it drives the intent, and a process that resumes
	// the intent later gets them from Config.SendHookFunc.
	Header http.Header
	// Body is sent with every attempt; at most 10 MiB.
	Body []byte
	// Key is the Idempotency-Key. When empty, an Idempotency-Key header is
	// used if present, else a random UUID is minted, once.
	Key string
}

// Intent is one user action: one request, one key, driven to an outcome.
type Intent struct {
	ID    string
	Key   string
	State IntentState

	Method string
	URL    string
	Header http.Header // as stored: without credential headers (see Config.CredentialHeaders)
	Body   []byte
	// Fingerprint is the SHA-256 of the method, URL and body. Submitting the
	// same key again with a different fingerprint is ErrKeyReused.
	Fingerprint []byte

	Attempts int
	// NextAttemptAt is when the next attempt may start: the due time, or,
	// while a process holds the intent's lease, the lease's end if later.
	NextAttemptAt time.Time
	// FirstAttemptAt is zero until the first attempt starts.
	FirstAttemptAt time.Time
	// Horizon is the last instant an attempt may start: FirstAttemptAt plus
	// the effective window minus the safety margin. Zero until the first
	// attempt; once set it only ever moves earlier.
	Horizon   time.Time
	CreatedAt time.Time
	UpdatedAt time.Time

	// Outcome is the definitive response; nil while pending, and for
	// expired or canceled intents.
	Outcome *Outcome
	// LastError describes the last failed attempt or why the intent ended.
	LastError string
	// CredentialHeaders are the names (canonical, sorted) of the
	// credential headers the request had when it was queued: their values
	// were never stored, so a process resuming the intent must supply them
	// (Config.SendHookFunc). Nil if none (or queued before schema 5).
	CredentialHeaders []string

	// instance is the queue instance that queued it ("" if before 004).
	instance string
}

// Outcome is the definitive response to an intent.
type Outcome struct {
	Status int
	// Header is the response header as stored: the headers of
	// Config.OutcomeHeaders and the profile's replay markers.
	Header http.Header
	Body   []byte
	// Replayed is true when the server marked the answer as a replay from
	// its idempotency store (Idempotent-Replayed: true, or the markers of
	// the host's Profile): the effect, if any, happened on an earlier
	// attempt, and the answer is final whatever its status.
	Replayed bool

	// keyReused: the host's profile read this answer as "key reused".
	keyReused bool
}

// Attempt is one entry of an intent's attempt log.
type Attempt struct {
	N          int
	Token      int64 // the lease's fencing token
	StartedAt  time.Time
	FinishedAt time.Time // zero if the process died mid-attempt
	Status     int       // 0 when there was no response
	Error      string
	Replayed   bool
}

// ListOptions filters [Client.List]. The zero value lists the oldest 100
// intents of every state.
type ListOptions struct {
	// State keeps only intents in this state. Empty means every state.
	State IntentState
	// UpdatedSince keeps only intents last updated at or after this time.
	UpdatedSince time.Time
	// Limit is the maximum number of intents. Defaults to 100.
	Limit int
}

// fingerprintVersion prefixes every client fingerprint.
const fingerprintVersion = "idemkit-client-fp-v1"

func fingerprint(method, rawURL string, body []byte) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%d\n", fingerprintVersion, method, rawURL, len(body))
	h.Write(body)
	return h.Sum(nil)
}

// prepared is a validated Request split into what is stored and what is
// only kept in memory.
type prepared struct {
	method, url, host string
	key               string
	header            http.Header // stored
	creds             http.Header // memory only
	body              []byte
	fp                []byte
}

// credNames are the names of the credential headers, sorted.
func (p *prepared) credNames() []string {
	if len(p.creds) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(p.creds))
}

// credNamesJSON is credNames as stored: a JSON array, or NULL.
func (p *prepared) credNamesJSON() any {
	names := p.credNames()
	if names == nil {
		return nil
	}
	b, _ := json.Marshal(names)
	return string(b)
}

// prepare validates req for the host's profile prof and separates the
// credential headers.
func prepare(req *Request, cfg *Config, prof *Profile) (*prepared, error) {
	if req == nil {
		return nil, invalidf("nil Request")
	}
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	if !validToken(method) {
		return nil, invalidf("method %q is not a valid HTTP token", method)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, invalidf("URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalidf("URL %q: scheme must be http or https", redact(req.URL))
	}
	if u.Host == "" {
		return nil, invalidf("URL %q: no host", redact(req.URL))
	}
	if u.User != nil {
		return nil, invalidf("URL: user:password@ would be stored in the queue; send credentials with Config.SendHookFunc")
	}
	if err := cfg.checkQuery(u); err != nil {
		return nil, err
	}
	if len(req.Body) > maxBodySize {
		return nil, invalidf("body is %d bytes, more than the limit (%d)", len(req.Body), maxBodySize)
	}
	p := &prepared{
		method: method,
		url:    u.String(),
		host:   strings.ToLower(u.Scheme + "://" + u.Host),
		header: http.Header{},
		creds:  http.Header{},
		body:   req.Body,
		key:    req.Key,
	}
	if p.body == nil {
		p.body = []byte{}
	}
	for name, values := range req.Header {
		if !validToken(name) {
			return nil, invalidf("header name %q is not a valid HTTP token", name)
		}
		// The stored codec refuses what no HTTP client may send.
		if _, err := wire.DecodeHeader(wire.EncodeHeader(http.Header{name: values})); err != nil {
			return nil, invalidf("header %s: value contains a control character (CR, LF, NUL, …), which no HTTP client may send", name)
		}
		cn := http.CanonicalHeaderKey(name)
		switch {
		case cn == http.CanonicalHeaderKey(prof.KeyHeader):
			if len(values) != 1 {
				return nil, invalidf("%s header given %d times", cn, len(values))
			}
			if p.key == "" {
				p.key = values[0]
			} else if p.key != values[0] {
				return nil, invalidf("Request.Key and the %s header differ", cn)
			}
		case cfg.memoryOnly(cn):
			p.creds[cn] = append([]string(nil), values...)
		default:
			p.header[cn] = append([]string(nil), values...)
		}
	}
	if p.key != "" {
		if err := prof.checkKey(p.key); err != nil {
			return nil, err
		}
	}
	p.fp = fingerprint(p.method, p.url, p.body)
	return p, nil
}

// validateKey checks what every key must be, whatever the profile (the
// wire contract): 1 to 255 bytes of valid UTF-8 without control characters.
// Profile.checkKey adds what the profile's encoding can carry.
func validateKey(k string) error {
	var ke *wire.KeyError
	if err := wire.CheckKey(k, wire.MaxKeyBytes); errors.As(err, &ke) {
		return invalidf("%s", ke.Reason)
	} else if err != nil {
		return invalidf("%v", err)
	}
	return nil
}

// validToken reports whether s is an RFC 9110 token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// redact removes user info and the query from a URL for logs and errors.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	return u.String()
}

// row is one intents row as scanned, before decoding.
type row struct {
	id, key, state, method, url, host string
	header                            []byte
	body, fp                          []byte
	attempts                          int64
	nextAttemptAt                     string
	firstAttemptAt, horizon           *string
	leaseToken                        int64
	outcomeStatus                     *int64
	outcomeHeader                     []byte
	outcomeBody                       []byte
	outcomeReplayed                   *int64
	outcomeKeyReused                  int64
	lastError                         string
	createdAt, updatedAt              string
	instance                          *string
	credentialHeaders                 *string
	leasedUntil                       *string
}

// rowColumns lists the columns scanned into a row, in scan order.
const rowColumns = `id, key, state, method, url, host, header, body, fingerprint, attempts,
	next_attempt_at, first_attempt_at, horizon, lease_token, outcome_status, outcome_header,
	outcome_body, outcome_replayed, outcome_key_reused, last_error, created_at, updated_at, instance,
	credential_headers, leased_until`

type scanner interface{ Scan(dest ...any) error }

func scanRow(s scanner) (*row, error) {
	r := &row{}
	err := s.Scan(&r.id, &r.key, &r.state, &r.method, &r.url, &r.host, &r.header, &r.body, &r.fp,
		&r.attempts, &r.nextAttemptAt, &r.firstAttemptAt, &r.horizon, &r.leaseToken, &r.outcomeStatus,
		&r.outcomeHeader, &r.outcomeBody, &r.outcomeReplayed, &r.outcomeKeyReused, &r.lastError, &r.createdAt, &r.updatedAt, &r.instance,
		&r.credentialHeaders, &r.leasedUntil)
	return r, err
}

// decodeIntent turns a stored row into an Intent. Anything it cannot make
// sense of is a Corrupt QueueError, never a panic.
func decodeIntent(r *row) (*Intent, error) {
	bad := func(what string, err error) error {
		if err != nil {
			return queueErrorf(queueCorrupt, "intent %q: %s: %w", r.id, what, err)
		}
		return queueErrorf(queueCorrupt, "intent %q: %s", r.id, what)
	}
	in := &Intent{
		ID: r.id, Key: r.key, State: IntentState(r.state), Method: r.method, URL: r.url,
		Body: r.body, Fingerprint: r.fp, Attempts: int(r.attempts), LastError: r.lastError,
	}
	if r.instance != nil {
		in.instance = *r.instance
	}
	if r.id == "" {
		return nil, bad("empty id", nil)
	}
	if r.credentialHeaders != nil {
		if err := json.Unmarshal([]byte(*r.credentialHeaders), &in.CredentialHeaders); err != nil {
			return nil, bad("credential_headers", err)
		}
	}
	if !in.State.valid() {
		return nil, bad(fmt.Sprintf("unknown state %q", r.state), nil)
	}
	if err := validateKey(r.key); err != nil {
		return nil, bad("key", err)
	}
	if !validToken(r.method) {
		return nil, bad("method", nil)
	}
	if r.attempts < 0 || r.attempts > 1<<31 {
		return nil, bad("attempts out of range", nil)
	}
	if len(r.body) > maxBodySize {
		return nil, bad("body over the size limit", nil)
	}
	if in.Body == nil {
		in.Body = []byte{}
	}
	h, err := wire.DecodeHeader(r.header)
	if err != nil {
		return nil, bad("header", err)
	}
	in.Header = h
	var t, leasedUntil time.Time
	for _, f := range []struct {
		dst  *time.Time
		src  *string
		name string
	}{
		{&in.NextAttemptAt, &r.nextAttemptAt, "next_attempt_at"},
		{&in.FirstAttemptAt, r.firstAttemptAt, "first_attempt_at"},
		{&in.Horizon, r.horizon, "horizon"},
		{&in.CreatedAt, &r.createdAt, "created_at"},
		{&in.UpdatedAt, &r.updatedAt, "updated_at"},
		{&leasedUntil, r.leasedUntil, "leased_until"},
	} {
		if f.src == nil {
			continue
		}
		if t, err = wire.ParseTime(*f.src); err != nil {
			return nil, bad(f.name, err)
		}
		*f.dst = t
	}
	if leasedUntil.After(in.NextAttemptAt) {
		in.NextAttemptAt = leasedUntil // held: due when the lease ends
	}
	if r.outcomeStatus != nil {
		st := *r.outcomeStatus
		if st < 100 || st > 999 {
			return nil, bad("outcome status out of range", nil)
		}
		oh, err := wire.DecodeHeader(r.outcomeHeader)
		if err != nil {
			return nil, bad("outcome header", err)
		}
		body := r.outcomeBody
		if body == nil {
			body = []byte{}
		}
		in.Outcome = &Outcome{Status: int(st), Header: oh, Body: body,
			Replayed: r.outcomeReplayed != nil && *r.outcomeReplayed != 0, keyReused: r.outcomeKeyReused != 0}
	}
	return in, nil
}
