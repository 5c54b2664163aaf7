package idemkit

import (
	"net/http"
	"net/url"

	"github.com/idemkit/idemkit/internal/policy"
)

// What is kept off the disk. The queue file is plaintext: anything written
// there is readable by whoever gets a copy of it (a backup, a support
// bundle). By default no credential reaches it: credential request headers
// stay in memory, credentials in the URL query are refused, and only an
// allowlist of response headers is stored. The rules (the default lists,
// header patterns, the query check, the outcome's headers) are
// internal/policy's, shared with package idemriver.

// memoryOnly reports whether request header cn is kept out of the queue.
func (c *Config) memoryOnly(cn string) bool {
	if c.StoredHeaders != nil {
		return !policy.HeaderMatches(c.StoredHeaders, cn)
	}
	return policy.HeaderMatches(c.CredentialHeaders, cn)
}

// checkQuery refuses credentials in the URL query, which would be stored.
func (c *Config) checkQuery(u *url.URL) error {
	if c.AllowURLCredentials {
		return nil
	}
	name, err := policy.QueryCredential(u.RawQuery)
	if err != nil {
		return invalidf("URL query: %v", err)
	}
	if name != "" {
		return invalidf("URL query parameter %q looks like a credential and would be written to the queue; add it in Config.SendHookFunc, or set Config.AllowURLCredentials", name)
	}
	return nil
}

// keptOutcome is o with the allowlisted headers only (and the profile's
// replay markers and key header, and Idempotent-Response-Omitted: what the
// server said about the body is part of the outcome). On disk, with Config.OmitOutcomeBody, it
// has neither body nor headers: status and replay marker only.
func (c *Config) keptOutcome(o *Outcome, prof *Profile, onDisk bool) *Outcome {
	s := *o
	if onDisk && c.OmitOutcomeBody {
		s.Header = http.Header{}
		s.Body = []byte{}
		return &s
	}
	s.Header = policy.StoredOutcomeHeader(o.Header, prof, c.CredentialHeaders, c.OutcomeHeaders)
	return &s
}
