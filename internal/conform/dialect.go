package conform

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
)

// Answer matches a response: its status and, when Code is not empty, one
// of the codes of its JSON body (read under codeRule). It is the client
// profiles' policy.Answer; the battery ignores its Wait.
type Answer = policy.Answer

// Dialect is what the battery expects of an API speaking one provider's
// idempotency dialect. Its header names, replay markers, in-flight and
// key-reused answers and window are those of the client's profiles
// (policy.Known, from which LookupDialect derives them); the fields
// after KeyReused say which of those the provider documents as a promise,
// so that the battery fails only what the dialect promises — with one
// addition: under the idemkit and ietf dialects an in-flight answer must
// carry Retry-After. The IETF draft does not say so; without it a client
// cannot know when to come back, and the battery treats that as the bug
// it is. Where a provider documents its in-progress answer without one
// (stripe, checkout, paypal), the battery notes its absence.
type Dialect struct {
	Name      string
	KeyHeader string
	// KeyQuoted sends keys as RFC 8941 sf-strings.
	KeyQuoted bool
	KeyMaxLen int
	// Window is the documented retention, for an API without an
	// Idempotency-Window header; 0 when undocumented.
	Window time.Duration
	// ReplayHeaders are the markers accepted on a replay.
	ReplayHeaders []string
	// InFlight are the answers that mean "a request with this key is in
	// progress" (besides a plain 409, which every dialect accepts).
	InFlight []Answer
	// KeyReused are the answers that mean "this key was used with another
	// request"; empty when the provider documents none (then any 4xx that
	// is not a replay counts as a refusal).
	KeyReused []Answer

	// MarkerRequired: a replay must carry one of ReplayHeaders.
	MarkerRequired bool
	// RetryAfterRequired: an in-flight answer must carry Retry-After.
	RetryAfterRequired bool
	// WindowHeader: every keyed answer carries Idempotency-Window.
	WindowHeader bool
	// KeyRequired: a request without a key (or with an empty one) is
	// refused; otherwise the API runs it without idempotency.
	KeyRequired bool
	// Doc is where the provider documents its dialect.
	Doc string
}

// replaySpellings are the replay markers seen in the wild (the client
// profiles' list).
var replaySpellings = policy.ReplaySpellings()

// DialectNames are the dialects the battery and the fakes know, in the
// order help texts list them.
var DialectNames = []string{"idemkit", "ietf", "stripe", "adyen", "checkout", "paypal"}

// LookupDialect returns the dialect called name (one of DialectNames): the
// header, key encoding and limit, window, replay markers, in-progress
// answers (the profile's Retry answers) and key-reused answers of the
// client's profile of that name, and what the provider promises of them.
func LookupDialect(name string) (Dialect, bool) {
	if !slices.Contains(DialectNames, name) {
		return Dialect{}, false
	}
	p, ok := policy.Known(name)
	if !ok {
		return Dialect{}, false
	}
	d := Dialect{
		Name:          name,
		KeyHeader:     p.KeyHeader,
		KeyQuoted:     p.KeyQuoted,
		KeyMaxLen:     p.KeyMaxLen,
		Window:        p.Window,
		ReplayHeaders: p.ReplayHeaders,
		InFlight:      answers(p.Retry),
		KeyReused:     answers(p.KeyReused),
	}
	switch name {
	case "idemkit":
		d.MarkerRequired = true
		d.RetryAfterRequired = true
		d.WindowHeader = true
		d.KeyRequired = true
		d.Doc = "https://github.com/idemkit/idemkit#the-contract"
	case "ietf":
		// Keys bare, as the client's ietf profile sends them: servers
		// store the header value verbatim, quotes included (issue 17).
		d.RetryAfterRequired = true
		d.KeyRequired = true
		d.Doc = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"
	case "stripe":
		d.MarkerRequired = true
		d.Doc = "https://docs.stripe.com/api/idempotent_requests"
	case "adyen":
		d.Doc = "https://docs.adyen.com/development-resources/api-idempotency"
	case "checkout":
		d.Doc = "https://www.checkout.com/docs/developer-resources/api/idempotency"
	case "paypal":
		d.Doc = "https://developer.paypal.com/api/rest/reference/idempotency"
	}
	return d, true
}

// answers are as (a profile's copy) with status and code only.
func answers(as []Answer) []Answer {
	for i := range as {
		as[i].Wait = 0
	}
	return as
}

// KeyValue is the field value that carries key k in d's encoding.
func (d *Dialect) KeyValue(k string) string {
	if !d.KeyQuoted {
		return k
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

// replayMarker returns the replay marker of h ("Name: value"), or "" if h
// carries none. Every spelling in the wild counts, whatever the dialect.
func (d *Dialect) replayMarker(h http.Header) string {
	name, v, ok := policy.ReplayMarker(append(slices.Clone(d.ReplayHeaders), replaySpellings...), h)
	if !ok {
		return ""
	}
	return http.CanonicalHeaderKey(name) + ": " + v
}

// codeRule is where the battery reads a body's error codes: the client
// profiles' rule, with PayPal's "issue", and the objects of a "details"
// array.
var codeRule = func() policy.CodeRule {
	r := policy.ProfileCodes()
	r.Fields = append(r.Fields, "issue")
	r.Lists = []string{"details"}
	return r
}()

// matches reports whether a response matches one of as.
func matches(as []Answer, status int, h http.Header, body []byte) bool {
	m := policy.Matcher{Status: status, Header: h, Body: body, Rule: codeRule}
	_, ok := m.Match(as)
	return ok
}
