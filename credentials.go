package idemkit

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkit/idemkit/internal/wire"
)

// What is kept off the disk. The queue file is plaintext: anything written
// there is readable by whoever gets a copy of it (a backup, a support
// bundle). By default no credential reaches it: credential request headers
// stay in memory, credentials in the URL query are refused, and only an
// allowlist of response headers is stored.

// credentialHeadersDefault is the default Config.CredentialHeaders: names,
// and "*-Suffix" patterns matching any header that ends so.
var credentialHeadersDefault = []string{
	"Authorization", "Proxy-Authorization", "Cookie",
	"X-Api-Key", "Api-Key", "X-Auth-Token", "X-Amz-Security-Token",
	"*-Token", "*-Secret", "*-Api-Key", "*-Password", "*-Credential", "*-Credentials", "*-Session",
}

// outcomeHeadersDefault is the default Config.OutcomeHeaders. The replay
// markers and the key header of the host's profile are stored too.
var outcomeHeadersDefault = []string{
	"Content-Type", "Content-Language", "Location", "Date", "Etag", "Last-Modified",
	"Retry-After", wire.HeaderWindow, "Request-Id", "X-Request-Id",
}

// queryCredentials are URL query parameters (compared in lower case) that
// carry credentials; a URL with one is refused unless
// Config.AllowURLCredentials.
var queryCredentials = map[string]bool{
	"api_key": true, "apikey": true, "api-key": true, "key": true, "token": true,
	"access_token": true, "refresh_token": true, "id_token": true, "auth": true,
	"auth_token": true, "authorization": true, "secret": true, "client_secret": true,
	"password": true, "passwd": true, "pwd": true, "session": true, "sessionid": true,
	"signature": true, "sig": true, "x-api-key": true, "x-amz-security-token": true,
	"x-amz-signature": true, "x-amz-credential": true,
}

// headerMatches reports whether canonical header name cn is in list: a
// name (any case) or a "*-Suffix" pattern.
func headerMatches(list []string, cn string) bool {
	for _, n := range list {
		if suffix, ok := strings.CutPrefix(n, "*"); ok {
			if len(cn) > len(suffix) && strings.EqualFold(cn[len(cn)-len(suffix):], suffix) {
				return true
			}
			continue
		}
		if strings.EqualFold(n, cn) {
			return true
		}
	}
	return false
}

// validHeaderPattern: a header name, or "*" followed by "-" and a name.
func validHeaderPattern(n string) bool {
	if s, ok := strings.CutPrefix(n, "*"); ok {
		return strings.HasPrefix(s, "-") && wire.ValidToken(s)
	}
	return wire.ValidToken(n)
}

// memoryOnly reports whether request header cn is kept out of the queue.
func (c *Config) memoryOnly(cn string) bool {
	if c.StoredHeaders != nil {
		return !headerMatches(c.StoredHeaders, cn)
	}
	return headerMatches(c.CredentialHeaders, cn)
}

// checkQuery refuses credentials in the URL query, which would be stored.
func (c *Config) checkQuery(u *url.URL) error {
	if c.AllowURLCredentials || u.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return invalidf("URL query: %v", err)
	}
	for name := range q {
		if queryCredentials[strings.ToLower(name)] {
			return invalidf("URL query parameter %q looks like a credential and would be written to the queue; add it in Config.SendHookFunc, or set Config.AllowURLCredentials", name)
		}
	}
	return nil
}

// keptOutcome is o with the allowlisted headers only (and the profile's
// replay markers and key header, and Idempotent-Response-Omitted: what the
// server said about the body is part of the outcome). On disk, with Config.OmitOutcomeBody, it
// has neither body nor headers: status and replay marker only.
func (c *Config) keptOutcome(o *Outcome, prof *Profile, onDisk bool) *Outcome {
	s := *o
	s.Header = http.Header{}
	if onDisk && c.OmitOutcomeBody {
		s.Body = []byte{}
		return &s
	}
	for k, v := range o.Header {
		cn := http.CanonicalHeaderKey(k)
		if cn == "Set-Cookie" || headerMatches(c.CredentialHeaders, cn) {
			continue
		}
		if headerMatches(c.OutcomeHeaders, cn) || headerMatches(prof.ReplayHeaders, cn) || cn == http.CanonicalHeaderKey(prof.KeyHeader) ||
			cn == wire.HeaderOmitted {
			s.Header[cn] = append([]string(nil), v...)
		}
	}
	return &s
}
