package policy

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/idemkit/idemkit/internal/wire"
)

// What is kept out of a client's store, for both backends (the SQLite
// queue of package idemkit and the River jobs of package idemriver): an
// intent is stored in plaintext, readable by whoever gets a copy of it (a
// backup, a support bundle), so no credential reaches it. Credential
// request headers are dropped (kept in memory, or supplied again by a send
// hook), credentials in the URL query are refused, and only an allowlist of
// response headers is stored with an outcome.

// CredentialHeadersDefault is the default Config.CredentialHeaders of both
// clients: header names, and "*-Suffix" patterns matching any header that
// ends so (see HeaderMatches). Callers must not modify it.
var CredentialHeadersDefault = []string{
	"Authorization", "Proxy-Authorization", "Cookie",
	"X-Api-Key", "Api-Key", "X-Auth-Token", "X-Amz-Security-Token",
	"*-Token", "*-Secret", "*-Api-Key", "*-Password", "*-Credential", "*-Credentials", "*-Session",
}

// OutcomeHeadersDefault is the default Config.OutcomeHeaders of both
// clients: the response headers stored with an outcome, besides those
// StoredOutcomeHeader always keeps. Callers must not modify it.
var OutcomeHeadersDefault = []string{
	"Content-Type", "Content-Language", "Location", "Date", "Etag", "Last-Modified",
	"Retry-After", wire.HeaderWindow, "Request-Id", "X-Request-Id",
}

// queryCredentials are URL query parameters (compared in lower case) that
// carry credentials.
var queryCredentials = map[string]bool{
	"api_key": true, "apikey": true, "api-key": true, "key": true, "token": true,
	"access_token": true, "refresh_token": true, "id_token": true, "auth": true,
	"auth_token": true, "authorization": true, "secret": true, "client_secret": true,
	"password": true, "passwd": true, "pwd": true, "session": true, "sessionid": true,
	"signature": true, "sig": true, "x-api-key": true, "x-amz-security-token": true,
	"x-amz-signature": true, "x-amz-credential": true,
}

// HeaderMatches reports whether canonical header name cn is in list: a
// name (any case) or a "*-Suffix" pattern, which matches every longer name
// that ends with "-Suffix" (any case).
func HeaderMatches(list []string, cn string) bool {
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

// ValidHeaderPattern reports whether n may stand in a header list of
// HeaderMatches: a header name, or "*" followed by "-" and a name.
func ValidHeaderPattern(n string) bool {
	if s, ok := strings.CutPrefix(n, "*"); ok {
		return strings.HasPrefix(s, "-") && wire.ValidToken(s)
	}
	return wire.ValidToken(n)
}

// QueryCredential returns the first parameter (in sorted order) of the URL
// query rawQuery that looks like a credential (api_key, token,
// client_secret, …, in any case), or "" if none does. The error is the
// query's parse error.
func QueryCredential(rawQuery string) (string, error) {
	if rawQuery == "" {
		return "", nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", err
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if queryCredentials[strings.ToLower(name)] {
			return name, nil
		}
	}
	return "", nil
}

// StoredOutcomeHeader returns the headers of an answer h that are stored
// with its outcome, under canonical names: those in outcome, p's replay
// markers and key header, and Idempotent-Response-Omitted (what the server
// said about the body is part of the outcome); never Set-Cookie nor a
// header in credential. Values are copied.
func StoredOutcomeHeader(h http.Header, p *Profile, credential, outcome []string) http.Header {
	out := http.Header{}
	for k, v := range h {
		cn := http.CanonicalHeaderKey(k)
		if cn == "Set-Cookie" || HeaderMatches(credential, cn) {
			continue
		}
		if HeaderMatches(outcome, cn) || HeaderMatches(p.ReplayHeaders, cn) || cn == http.CanonicalHeaderKey(p.KeyHeader) ||
			cn == wire.HeaderOmitted {
			out[cn] = append([]string(nil), v...)
		}
	}
	return out
}
