package conform

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// Answer matches a response: its status and, when Code is not empty, one
// of the codes of its JSON body (see BodyCodes).
type Answer struct {
	Status int
	Code   string
}

// Dialect is what the battery expects of an API speaking one provider's
// idempotency dialect. Its header names, replay markers, in-flight and
// key-reused answers and window are those of the client's profiles
// (idemkit.KnownProfile, tested to agree in dialect_test.go); the fields
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
// profile's list).
var replaySpellings = []string{wire.HeaderReplayed, "Idempotency-Replayed", "Idempotent-Replay", "Idempotency-Replay"}

// DialectNames are the dialects the battery and the fakes know, in the
// order help texts list them.
var DialectNames = []string{"idemkit", "ietf", "stripe", "adyen", "checkout", "paypal"}

// LookupDialect returns the dialect called name (one of DialectNames).
func LookupDialect(name string) (Dialect, bool) {
	var d Dialect
	switch name {
	case "idemkit":
		d = Dialect{
			ReplayHeaders:      replaySpellings,
			InFlight:           []Answer{{http.StatusConflict, wire.ProblemType(wire.ProblemInFlight)}},
			KeyReused:          []Answer{{http.StatusUnprocessableEntity, wire.ProblemType(wire.ProblemKeyReused)}},
			MarkerRequired:     true,
			RetryAfterRequired: true,
			WindowHeader:       true,
			KeyRequired:        true,
			Doc:                "https://github.com/idemkit/idemkit#the-contract",
		}
	case "ietf":
		d = Dialect{
			// Bare, as the client's ietf profile sends it: servers store the
			// header value verbatim, quotes included (issue 17).
			KeyQuoted:          false,
			ReplayHeaders:      replaySpellings,
			InFlight:           []Answer{{Status: http.StatusConflict}},
			KeyReused:          []Answer{{Status: http.StatusUnprocessableEntity}, {Status: http.StatusExpectationFailed}},
			RetryAfterRequired: true,
			KeyRequired:        true,
			Doc:                "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/",
		}
	case "stripe":
		d = Dialect{
			Window:         24 * time.Hour,
			ReplayHeaders:  []string{wire.HeaderReplayed},
			InFlight:       []Answer{{http.StatusConflict, "idempotency_key_in_use"}, {Status: http.StatusTooManyRequests}},
			KeyReused:      []Answer{{http.StatusBadRequest, "idempotency_error"}},
			MarkerRequired: true,
			Doc:            "https://docs.stripe.com/api/idempotent_requests",
		}
	case "adyen":
		d = Dialect{KeyMaxLen: 64, Window: 31 * 24 * time.Hour,
			Doc: "https://docs.adyen.com/development-resources/api-idempotency"}
	case "checkout":
		d = Dialect{
			KeyHeader: "Cko-Idempotency-Key",
			Window:    24 * time.Hour,
			// 409 for a duplicate still being processed (it was 429, which
			// older integrations may still see), as the client's profile.
			InFlight: []Answer{{Status: http.StatusConflict}, {Status: http.StatusTooManyRequests}},
			Doc:      "https://www.checkout.com/docs/developer-resources/api/idempotency",
		}
	case "paypal":
		d = Dialect{KeyHeader: "PayPal-Request-Id",
			Doc: "https://developer.paypal.com/api/rest/reference/idempotency"}
	default:
		return Dialect{}, false
	}
	d.Name = name
	if d.KeyHeader == "" {
		d.KeyHeader = wire.HeaderKey
	}
	if d.KeyMaxLen == 0 {
		d.KeyMaxLen = wire.MaxKeyBytes
	}
	d.ReplayHeaders = slices.Clone(d.ReplayHeaders)
	d.InFlight = slices.Clone(d.InFlight)
	d.KeyReused = slices.Clone(d.KeyReused)
	return d, true
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
	for _, name := range append(slices.Clone(d.ReplayHeaders), replaySpellings...) {
		for _, v := range h.Values(name) {
			t := strings.TrimSpace(v)
			if strings.EqualFold(t, "true") || t == "?1" {
				return http.CanonicalHeaderKey(name) + ": " + v
			}
		}
	}
	return ""
}

// matches reports whether a response matches one of as.
func matches(as []Answer, status int, h http.Header, body []byte) bool {
	var codes []string
	for _, a := range as {
		if a.Status != status {
			continue
		}
		if a.Code == "" {
			return true
		}
		if codes == nil {
			codes = BodyCodes(h, body)
		}
		if slices.Contains(codes, a.Code) {
			return true
		}
	}
	return false
}

// codeFields are the JSON members read as error codes.
var codeFields = []string{"type", "code", "errorCode", "error_type", "name", "issue"}

// BodyCodes returns the error codes of a JSON body: the "type", "code",
// "errorCode", "error_type", "name" or "issue" members of the body, of its
// "error" object and of the objects of its "details" array, and the strings
// of its "error_codes" array. It is the client's rule (profile.go), with
// PayPal's details[].issue added. Never nil.
func BodyCodes(h http.Header, body []byte) []string {
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
	if raw, ok := top["details"]; ok {
		var list []map[string]json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			for _, m := range list {
				collect(m)
			}
		}
	}
	return out
}
