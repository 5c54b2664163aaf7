package idemkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// Profile describes the idempotency dialect of one API: which header
// carries the key and how, how long the API keeps keys, how it marks a
// replayed answer, and how it says "still in progress" and "key reused".
// [Config].Profiles picks one per host; [KnownProfile] returns the shipped
// ones, which callers may copy and adjust.
//
// Whatever the profile, a response marked as a replay is the server's
// final answer (succeeded for 2xx, failed otherwise) and is never retried.
type Profile struct {
	// Name names the profile in logs and errors.
	Name string

	// KeyHeader is the request header that carries the key. Defaults to
	// Idempotency-Key.
	KeyHeader string

	// KeyQuoted sends the key as an RFC 8941 sf-string ("key"), as the IETF
	// draft defines the field; false sends it bare. Only for a server that
	// parses the field strictly: most servers (the npm middlewares among
	// them) store the header value verbatim, quotes included, so a quoted
	// key and the same key sent bare by another tool (curl, another client)
	// are two keys there, and the request takes effect twice. No shipped
	// profile sets it. Keys the client mints (UUIDs) fit both. A caller's
	// key that the encoding cannot carry unchanged is refused with
	// ErrInvalidRequest, never quoted behind the caller's back: bare refuses
	// surrounding spaces or tabs, a leading double quote and a comma; quoted
	// refuses anything but printable ASCII. The form is fixed per intent at
	// its first attempt: changing this field never changes the bytes of a
	// key already sent.
	KeyQuoted bool

	// KeyMaxLen is the longest key, in bytes, at most 255. Defaults to 255.
	KeyMaxLen int

	// Window is how long the API keeps keys, for an API that publishes no
	// Idempotency-Window header: when positive it replaces Config.Window
	// for this profile's hosts. A shorter Idempotency-Window advertised by
	// the host still wins. Defaults to Config.Window.
	Window time.Duration

	// ReplayHeaders are the response headers that mark a replayed answer
	// when their value is "true" (any case) or "?1" (an RFC 8941 boolean).
	ReplayHeaders []string

	// Retry lists the answers that mean "not yet": a request with this key
	// is still being processed, or the caller is rate limited. They are
	// retried with the same key (after Retry-After, or Answer.Wait, or the
	// backoff). Besides these, every profile retries 408, 425, 5xx other
	// than 501, and a 409, 429 or 503 carrying a Retry-After, unless the
	// answer is a replay.
	Retry []Answer

	// KeyReused lists the answers that mean the key was already used with
	// a different request: the intent ends failed with ErrKeyReused.
	KeyReused []Answer
}

// Answer matches a response: its Status and, when Code is not empty, a code
// in its JSON body, compared exactly: the "type" of an
// application/problem+json body, or the "type", "code", "errorCode",
// "error_type" or "name" of the body or of its "error" object (Stripe,
// Adyen, Checkout.com and PayPal spell their error codes so).
type Answer struct {
	Status int
	Code   string
	// Wait is the shortest wait before retrying an answer of Profile.Retry
	// (an API's documented advice); a longer Retry-After or backoff wins.
	Wait time.Duration
}

// Problem type URIs of the idemkit server, from the wire contract.
var (
	problemTypeInFlight  = wire.ProblemType(wire.ProblemInFlight)
	problemTypeKeyReused = wire.ProblemType(wire.ProblemKeyReused)
)

// replaySpellings are the replay markers seen in the wild: Stripe's and
// the idemkit server's Idempotent-Replayed, and the variants other
// middlewares send.
var replaySpellings = []string{wire.HeaderReplayed, "Idempotency-Replayed", "Idempotent-Replay", "Idempotency-Replay"}

// KnownProfile returns a copy of a shipped profile, by name:
//
//   - "idemkit" (the default): the server package of this module.
//     Idempotency-Key sent bare; window from its Idempotency-Window header;
//     409 with problem type …/problems.md#in-flight is in progress; 422 with
//     …#key-reused is key reuse; replays marked Idempotent-Replayed (the
//     other common spellings are accepted too).
//   - "ietf": draft-ietf-httpapi-idempotency-key-header
//     (https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/;
//     read at -07; -09, November 2026, is the current revision and was not
//     reviewed for this profile): 409 means a request with the key is in
//     progress, 422 that the key was reused with another payload. The draft
//     names no replay header and no window: the common replay spellings are
//     accepted, Config.Window applies. 417 also counts as key reuse (not in
//     the draft; published middlewares answer it so). The draft defines the
//     field as an RFC 8941 sf-string ("key"), but the key is sent bare:
//     servers that store the header value verbatim (the npm middlewares
//     among them) would otherwise see a quoted key and the same key sent
//     bare by curl or another client as two keys, and charge twice. A
//     server that parses the field strictly as RFC 8941 may refuse a bare
//     key (a 400 on the first attempt): for such a server set KeyQuoted on
//     a copy.
//   - "stripe": the v1 API, https://docs.stripe.com/api/idempotent_requests and
//     https://docs.stripe.com/error-low-level#idempotency. Keys up to 255
//     characters, pruned once at least 24 hours old; replays marked
//     Idempotent-Replayed: true; a reused key is 400 with error type
//     idempotency_error; a concurrent request is 409 with code
//     idempotency_key_in_use; 429 is rate limiting (retry with backoff).
//   - "stripe-v2": Stripe's v2 API (same pages, the v2 sections): keys are
//     kept 30 days. v2 does not replay a failed request: a retry with the
//     same key "retries failed or partially failed work to completion when
//     possible and returns an updated response". The profile does what it
//     does everywhere, retrying with the same key, and takes the updated
//     response as it comes (a fresh answer, not a replay). The other
//     answers are v1's. api.stripe.com serves both: a client that calls
//     v1 and v2 endpoints should keep the "stripe" profile (the shorter
//     window is the safe one).
//   - "adyen": https://docs.adyen.com/development-resources/api-idempotency.
//     Idempotency-Key of at most 64 characters, "valid for a minimum period
//     of 31 days after first submission" (per company account, not across
//     regions); the response echoes the key but
//     the page names no replay marker, no in-progress and no reuse answer,
//     so only the common rules apply (5xx and a Retry-After are retried).
//   - "checkout": https://www.checkout.com/docs/developer-resources/api/idempotency
//     and https://www.checkout.com/docs/payments/manage-payments/retry-a-payment.
//     Cko-Idempotency-Key; keys expire after 24 hours by default; a
//     duplicate of a request still being processed gets 409 (it was 429:
//     both are retried, after at least the 30 seconds the docs advise);
//     only successfully processed requests are replayed, and a duplicate
//     of one is answered 202 with the original response (a success, so the
//     intent succeeds; it is not marked replayed, because a fresh payment
//     that is pending is answered 202 too); an unprocessed one is attempted
//     again.
//   - "paypal": https://developer.paypal.com/api/rest/reference/idempotency.
//     PayPal-Request-Id; how long the id is stored is per API ("see the
//     reference for your API"), so Config.Window applies: set Window to
//     what your API's reference says. A repeated id returns "the latest
//     status of the previous request"; simultaneous requests may fail the
//     second one; 5xx and timeouts are to be retried with the same id.
//
// It returns false for any other name.
func KnownProfile(name string) (Profile, bool) {
	var p Profile
	switch name {
	case "idemkit":
		p = Profile{
			Name:          "idemkit",
			ReplayHeaders: replaySpellings,
			Retry:         []Answer{{Status: http.StatusConflict, Code: problemTypeInFlight}},
			KeyReused:     []Answer{{Status: http.StatusUnprocessableEntity, Code: problemTypeKeyReused}},
		}
	case "ietf":
		p = Profile{
			Name:          "ietf",
			ReplayHeaders: replaySpellings,
			Retry:         []Answer{{Status: http.StatusConflict}},
			KeyReused:     []Answer{{Status: http.StatusUnprocessableEntity}, {Status: http.StatusExpectationFailed}},
		}
	case "stripe":
		p = Profile{
			Name:          "stripe",
			Window:        24 * time.Hour,
			ReplayHeaders: []string{"Idempotent-Replayed"},
			Retry: []Answer{
				{Status: http.StatusConflict, Code: "idempotency_key_in_use"},
				{Status: http.StatusTooManyRequests},
			},
			KeyReused: []Answer{{Status: http.StatusBadRequest, Code: "idempotency_error"}},
		}
	case "stripe-v2":
		p, _ = KnownProfile("stripe")
		p.Name = "stripe-v2"
		p.Window = 30 * 24 * time.Hour
	case "adyen":
		p = Profile{Name: "adyen", KeyMaxLen: 64, Window: 31 * 24 * time.Hour}
	case "checkout":
		p = Profile{
			Name:      "checkout",
			KeyHeader: "Cko-Idempotency-Key",
			Window:    24 * time.Hour,
			Retry: []Answer{
				{Status: http.StatusConflict, Wait: 30 * time.Second},
				{Status: http.StatusTooManyRequests, Wait: 30 * time.Second},
			},
		}
	case "paypal":
		p = Profile{Name: "paypal", KeyHeader: "PayPal-Request-Id"}
	default:
		return Profile{}, false
	}
	return p.withDefaults(), true
}

// withDefaults returns a deep copy of p with its defaults filled in.
func (p Profile) withDefaults() Profile {
	if p.KeyHeader == "" {
		p.KeyHeader = wire.HeaderKey
	}
	if p.KeyMaxLen <= 0 {
		p.KeyMaxLen = wire.MaxKeyBytes
	}
	p.ReplayHeaders = append([]string(nil), p.ReplayHeaders...)
	p.Retry = append([]Answer(nil), p.Retry...)
	p.KeyReused = append([]Answer(nil), p.KeyReused...)
	return p
}

func (p *Profile) validate(where string) error {
	if !wire.ValidToken(p.KeyHeader) {
		return fmt.Errorf("idemkit: %s: KeyHeader %q is not a header name", where, p.KeyHeader)
	}
	if p.KeyMaxLen > wire.MaxKeyBytes {
		return fmt.Errorf("idemkit: %s: KeyMaxLen %d is over %d", where, p.KeyMaxLen, wire.MaxKeyBytes)
	}
	if p.Window < 0 || (p.Window > 0 && p.Window < time.Second) {
		return fmt.Errorf("idemkit: %s: Window must be 0 or at least 1s, got %v", where, p.Window)
	}
	for _, h := range p.ReplayHeaders {
		if !wire.ValidToken(h) {
			return fmt.Errorf("idemkit: %s: ReplayHeaders: %q is not a header name", where, h)
		}
	}
	for _, a := range append(append([]Answer(nil), p.Retry...), p.KeyReused...) {
		if a.Status < 100 || a.Status > 999 {
			return fmt.Errorf("idemkit: %s: Answer status %d out of range", where, a.Status)
		}
	}
	return nil
}

// checkKey reports whether key k can be sent unchanged, quoted (an RFC
// 8941 sf-string) or bare, with an error saying why not.
func (p *Profile) checkKey(k string, quoted bool) error {
	if len(k) > p.KeyMaxLen {
		return invalidf("key is %d bytes; profile %s allows 1 to %d", len(k), p.Name, p.KeyMaxLen)
	}
	if err := validateKey(k); err != nil {
		return err
	}
	if quoted {
		if _, ok := wire.QuoteString(k); !ok {
			return invalidf("key %q: profile %s sends keys as RFC 8941 strings, which carry printable ASCII only", k, p.Name)
		}
		return nil
	}
	if wire.NeedsQuotes(k) {
		return invalidf("key %q: profile %s sends keys bare, and a bare key with surrounding spaces, a leading quote or a comma would not reach the server unchanged; use another key (it is never quoted behind your back)", k, p.Name)
	}
	return nil
}

// keyValue is the field value that carries k, quoted or bare (k passed
// checkKey).
func (p *Profile) keyValue(k string, quoted bool) string {
	if !quoted {
		return k
	}
	v, _ := wire.QuoteString(k)
	return v
}

// replayed reports whether h marks a replayed answer.
func (p *Profile) replayed(h http.Header) bool {
	for _, name := range p.ReplayHeaders {
		for _, v := range h.Values(name) {
			v = strings.TrimSpace(v)
			if strings.EqualFold(v, "true") || v == "?1" {
				return true
			}
		}
	}
	return false
}

// verdict is what classify makes of a response.
type verdict int

const (
	// verdictPolicy: nothing in the profile decides; the CheckRetry
	// policy does.
	verdictPolicy verdict = iota
	// verdictFinal: a definitive answer (succeeded for 2xx, else failed).
	verdictFinal
	// verdictKeyReused: a definitive answer meaning the key was reused.
	verdictKeyReused
	// verdictRetry: "not yet": retry with the same key.
	verdictRetry
)

// decision is classify's result.
type decision struct {
	verdict  verdict
	replayed bool
	// minWait is the shortest wait before a retry (Answer.Wait).
	minWait time.Duration
}

// classify is the pure decision on one response under a profile: a replay
// is final whatever its status; then the profile's key-reused and retry
// answers; anything else is left to the retry policy. body is the response
// body as read (possibly cut short).
func classify(p *Profile, status int, h http.Header, body []byte) decision {
	if p.replayed(h) {
		return decision{verdict: verdictFinal, replayed: true}
	}
	var codes []string
	match := func(as []Answer) (Answer, bool) {
		for _, a := range as {
			if a.Status != status {
				continue
			}
			if a.Code == "" {
				return a, true
			}
			if codes == nil {
				codes = bodyCodes(h, body)
			}
			for _, c := range codes {
				if c == a.Code {
					return a, true
				}
			}
		}
		return Answer{}, false
	}
	if _, ok := match(p.KeyReused); ok {
		return decision{verdict: verdictKeyReused}
	}
	if a, ok := match(p.Retry); ok {
		return decision{verdict: verdictRetry, minWait: a.Wait}
	}
	return decision{verdict: verdictPolicy}
}

// codeFields are the JSON members read as error codes.
var codeFields = []string{"type", "code", "errorCode", "error_type", "name"}

// bodyCodes returns the error codes of a JSON body (see Answer): never nil,
// so classify parses a body at most once.
func bodyCodes(h http.Header, body []byte) []string {
	out := []string{}
	ct := strings.ToLower(h.Get("Content-Type"))
	trimmed := bytes.TrimSpace(body)
	if !strings.Contains(ct, "json") && (len(trimmed) == 0 || trimmed[0] != '{') {
		return out
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(trimmed, &top) != nil {
		return out
	}
	collect := func(m map[string]json.RawMessage) {
		for _, f := range codeFields {
			raw, ok := m[f]
			if !ok {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				out = append(out, s)
				continue
			}
			var n json.Number
			if json.Unmarshal(raw, &n) == nil {
				out = append(out, n.String())
			}
		}
		if raw, ok := m["error_codes"]; ok {
			var list []string
			if json.Unmarshal(raw, &list) == nil {
				out = append(out, list...)
			}
		}
	}
	collect(top)
	if raw, ok := top["error"]; ok {
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) == nil {
			collect(inner)
		}
	}
	return out
}
