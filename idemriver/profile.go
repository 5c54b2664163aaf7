package idemriver

import (
	"net/url"
	"strings"

	"github.com/idemkit/idemkit/internal/policy"
)

// Profile describes the idempotency dialect of one API (the key header and
// its encoding, the window the API keeps keys for, its replay marker, its
// "in progress" and "key reused" answers). It is package idemkit's Profile:
// idemkit.KnownProfile values may be given here as they are.
type Profile = policy.Profile

// Answer matches a response of a Profile's lists (see idemkit.Answer).
type Answer = policy.Answer

// KnownProfile returns a copy of a shipped profile by name, as
// idemkit.KnownProfile does: "idemkit" (the default), "ietf", "stripe",
// "stripe-v2", "adyen", "checkout", "paypal".
func KnownProfile(name string) (Profile, bool) { return policy.Known(name) }

// profileFor returns the dialect of the host of a URL as Config.Profiles
// names it ("host:port" before "host"), with its defaults filled in.
func (c *Client) profileFor(hookHost string) *Profile {
	if p, ok := c.profiles[hookHost]; ok {
		return p
	}
	if h, _, ok := strings.Cut(hookHost, ":"); ok {
		if p, ok := c.profiles[h]; ok {
			return p
		}
	}
	return c.defaultProfile
}

// buildProfiles validates the configured profiles once.
func (c *Client) buildProfiles() error {
	def := Profile{}
	if c.cfg.Profile != nil {
		def = *c.cfg.Profile
	} else {
		def, _ = policy.Known("idemkit")
	}
	if err := policy.Validate(&def, "Config.Profile"); err != nil {
		return err
	}
	d := policy.WithDefaults(def)
	c.defaultProfile = &d
	c.profiles = map[string]*Profile{}
	for host, p := range c.cfg.Profiles {
		if err := policy.Validate(&p, "Config.Profiles["+host+"]"); err != nil {
			return err
		}
		p = policy.WithDefaults(p)
		c.profiles[strings.ToLower(host)] = &p
	}
	return nil
}

// hostOf returns scheme://host of a URL (how windows are remembered) and
// its host as in the URL, lower case (how the send hook and profiles name
// it).
func hostOf(raw string) (host, hookHost string) {
	u, err := url.Parse(raw)
	if err != nil {
		return raw, raw
	}
	h := strings.ToLower(u.Host)
	return strings.ToLower(u.Scheme) + "://" + h, h
}
