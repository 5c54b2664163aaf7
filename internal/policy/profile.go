package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/wire"
)

// Profile describes the idempotency dialect of one API: which header
// carries the key and how, how long the API keeps keys, how it marks a
// replayed answer, and how it says "still in progress" and "key reused".
// idemkit.Config.Profiles picks one per host; [Known] returns the shipped
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
	// Withheld lists the answers that mean the request with this key was
	// already processed but its stored response is withheld from this
	// caller (the idemkit server's 403 replay-forbidden, when the caller's
	// permission was revoked since). The effect may well have happened, so
	// the intent ends unknown, never failed: failed invites a retry under a
	// new key, which would do it twice. Reconcile it once the permission is
	// back (Client.Reconcile, Resend).
	Withheld []Answer
}

// Answer matches a response: its Status and, when Code is not empty, a code
// in its JSON body, compared exactly: the "type" of an
// application/problem+json body, or the "type", "code", "errorCode",
// "error_type" or "name" of the body or of its "error" object (Stripe,
// Adyen, Checkout.com and PayPal spell their error codes so), or a string
// of its "error_codes" array: the rule of ProfileCodes.
type Answer struct {
	Status int
	Code   string
	// Wait is the shortest wait before retrying an answer of Profile.Retry
	// (an API's documented advice); a longer Retry-After or backoff wins.
	Wait time.Duration
}

// Problem type URIs of the idemkit server, from the wire contract.
var (
	ProblemTypeInFlight  = wire.ProblemType(wire.ProblemInFlight)
	ProblemTypeKeyReused = wire.ProblemType(wire.ProblemKeyReused)
	ProblemTypeWithheld  = wire.ProblemType(wire.ProblemReplayForbidden)
)

// replaySpellings are the replay markers seen in the wild: Stripe's and
// the idemkit server's Idempotent-Replayed, and the variants other
// middlewares send.
var replaySpellings = []string{wire.HeaderReplayed, "Idempotency-Replayed", "Idempotent-Replay", "Idempotency-Replay"}

// ReplaySpellings returns the replay markers seen in the wild (the
// ReplayHeaders of the idemkit and ietf profiles), in a new slice.
func ReplaySpellings() []string { return slices.Clone(replaySpellings) }

// Known returns a copy of a shipped profile, by name ("idemkit",
// "ietf", "stripe", "stripe-v2", "adyen", "checkout", "paypal"; each is
// documented at idemkit.KnownProfile), with its defaults filled in. It
// returns false for any other name.
func Known(name string) (Profile, bool) {
	var p Profile
	switch name {
	case "idemkit":
		p = Profile{
			Name:          "idemkit",
			ReplayHeaders: replaySpellings,
			Retry:         []Answer{{Status: http.StatusConflict, Code: ProblemTypeInFlight}},
			KeyReused:     []Answer{{Status: http.StatusUnprocessableEntity, Code: ProblemTypeKeyReused}},
			Withheld:      []Answer{{Status: http.StatusForbidden, Code: ProblemTypeWithheld}},
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
		p, _ = Known("stripe")
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
	return WithDefaults(p), true
}

// WithDefaults returns a deep copy of p with its defaults filled in.
func WithDefaults(p Profile) Profile {
	if p.KeyHeader == "" {
		p.KeyHeader = wire.HeaderKey
	}
	if p.KeyMaxLen <= 0 {
		p.KeyMaxLen = wire.MaxKeyBytes
	}
	p.ReplayHeaders = append([]string(nil), p.ReplayHeaders...)
	p.Retry = append([]Answer(nil), p.Retry...)
	p.KeyReused = append([]Answer(nil), p.KeyReused...)
	p.Withheld = append([]Answer(nil), p.Withheld...)
	return p
}

// Validate checks a profile (with its defaults filled in); where names it
// in the error ("Config.Profile").
func Validate(p *Profile, where string) error {
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
	for _, a := range append(append(append([]Answer(nil), p.Retry...), p.KeyReused...), p.Withheld...) {
		if a.Status < 100 || a.Status > 999 {
			return fmt.Errorf("idemkit: %s: Answer status %d out of range", where, a.Status)
		}
	}
	return nil
}

// CheckKey reports whether key k can be sent unchanged under p, quoted
// (an RFC 8941 sf-string) or bare, with an error matching
// ErrInvalidRequest saying why not.
func CheckKey(p *Profile, k string, quoted bool) error {
	if len(k) > p.KeyMaxLen {
		return Invalidf("key is %d bytes; profile %s allows 1 to %d", len(k), p.Name, p.KeyMaxLen)
	}
	if err := ValidateKey(k); err != nil {
		return err
	}
	if quoted {
		if _, ok := wire.QuoteString(k); !ok {
			return Invalidf("key %q: profile %s sends keys as RFC 8941 strings, which carry printable ASCII only", k, p.Name)
		}
		return nil
	}
	if wire.NeedsQuotes(k) {
		return Invalidf("key %q: profile %s sends keys bare, and a bare key with surrounding spaces, a leading quote or a comma would not reach the server unchanged; use another key (it is never quoted behind your back)", k, p.Name)
	}
	return nil
}

// KeyValue is the field value that carries k, quoted or bare (k passed
// CheckKey).
func KeyValue(k string, quoted bool) string {
	if !quoted {
		return k
	}
	v, _ := wire.QuoteString(k)
	return v
}

// Replayed reports whether h marks a replayed answer under p.
func Replayed(p *Profile, h http.Header) bool {
	_, _, ok := ReplayMarker(p.ReplayHeaders, h)
	return ok
}

// ReplayMarker returns the first replay marker of h among the header
// names (tried in order): the name and the value of a header whose value
// is "true" (any case, spaces trimmed) or the RFC 8941 boolean ?1. ok is
// false when h carries none.
func ReplayMarker(names []string, h http.Header) (name, value string, ok bool) {
	for _, name := range names {
		for _, v := range h.Values(name) {
			t := strings.TrimSpace(v)
			if strings.EqualFold(t, "true") || t == "?1" {
				return name, v, true
			}
		}
	}
	return "", "", false
}

// Verdict is what a profile makes of an answer (see Classify).
type Verdict int

const (
	// VerdictPolicy: nothing in the profile decides; the retry policy
	// (CheckRetry) does.
	VerdictPolicy Verdict = iota
	// VerdictFinal: a definitive answer (succeeded for 2xx, else failed):
	// a replay.
	VerdictFinal
	// VerdictKeyReused: a definitive answer meaning the key was reused.
	VerdictKeyReused
	// VerdictRetry: "not yet": retry with the same key.
	VerdictRetry
	// VerdictWithheld: the request was processed, its answer is withheld
	// from this caller: the outcome is unknown.
	VerdictWithheld
)

// Reading is Classify's result.
type Reading struct {
	Verdict Verdict
	// Replayed: the answer carries one of the profile's replay markers.
	Replayed bool
	// MinWait is the shortest wait before a retry (Answer.Wait).
	MinWait time.Duration
}

// Classify is the pure reading of one response under a profile: a replay
// is final whatever its status; then the profile's key-reused and retry
// answers; anything else is left to the retry policy. body is the response
// body as read (possibly cut short).
func Classify(p *Profile, status int, h http.Header, body []byte) Reading {
	if Replayed(p, h) {
		return Reading{Verdict: VerdictFinal, Replayed: true}
	}
	m := Matcher{Status: status, Header: h, Body: body, Rule: profileCodes}
	if _, ok := m.Match(p.KeyReused); ok {
		return Reading{Verdict: VerdictKeyReused}
	}
	if _, ok := m.Match(p.Withheld); ok {
		return Reading{Verdict: VerdictWithheld}
	}
	if a, ok := m.Match(p.Retry); ok {
		return Reading{Verdict: VerdictRetry, MinWait: a.Wait}
	}
	return Reading{Verdict: VerdictPolicy}
}

// ValidateKey checks a key against the wire contract (1 to 255 bytes of
// visible ASCII), with an error matching ErrInvalidRequest.
func ValidateKey(k string) error {
	var ke *wire.KeyError
	if err := wire.CheckKey(k, wire.MaxKeyBytes); errors.As(err, &ke) {
		return Invalidf("%s", ke.Reason)
	} else if err != nil {
		return Invalidf("%v", err)
	}
	return nil
}

// Hosts picks the profile of a host: ByHost, keyed by lowercased
// "host:port" (which wins) or "host", else Default. It is
// idemkit.Config.Profile and Config.Profiles, with defaults filled in.
type Hosts struct {
	Default *Profile
	ByHost  map[string]Profile
}

// For returns the profile of the host of rawURL.
func (h Hosts) For(rawURL string) *Profile {
	if len(h.ByHost) > 0 {
		if u, err := url.Parse(rawURL); err == nil {
			for _, name := range []string{strings.ToLower(u.Host), strings.ToLower(u.Hostname())} {
				if p, ok := h.ByHost[name]; ok {
					return &p
				}
			}
		}
	}
	return h.Default
}

// KeyForm is how the key of an intent travels, "quoted" or "bare", fixed
// at its first claim (since the client's schema 007) and never changed
// after: quoted if its host's profile sets KeyQuoted, or if it was
// attempted before under the "ietf" profile (which quoted keys until then:
// its server has seen the quoted form), bare otherwise.
func KeyForm(p *Profile, attempted bool) string {
	if p.KeyQuoted || (attempted && p.Name == "ietf") {
		return "quoted"
	}
	return "bare"
}
