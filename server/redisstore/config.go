package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of Config.
const (
	prefixDefault       = "idemkit:"
	waitTimeoutDefault  = time.Second
	checkTimeoutDefault = 10 * time.Second
)

// Config configures a Store. The zero value is valid.
type Config struct {
	// Prefix starts every key the store writes, so that one Redis can hold
	// several stores (or a store next to other data). It must not contain
	// '{' or '}': the rest of the key is a hash tag. Defaults to "idemkit:".
	Prefix string
	// AllowEviction lets New accept a Redis whose maxmemory-policy is not
	// noeviction. Leave it false: an evicted record is a key that silently
	// stopped deduplicating, and eviction happens under memory pressure,
	// which is when traffic is high. Set it only for a Redis you know never
	// reaches maxmemory, and alert on Store.Evictions. Defaults to false.
	AllowEviction bool
	// WaitReplicas, when positive, makes Claim send WAIT WaitReplicas
	// WaitTimeout after acquiring, on the connection of the claim: the
	// claim is acknowledged by that many replicas before the handler runs,
	// so a failover to one of them keeps it. When fewer acknowledge in
	// time, the claim is released and Claim returns ErrReplicasBehind
	// (server.ErrStoreUnavailable). Not supported on a redis.Ring.
	// Defaults to 0 (no WAIT).
	WaitReplicas int
	// WaitTimeout bounds the WAIT of WaitReplicas. Defaults to 1s.
	WaitTimeout time.Duration
	// CheckTimeout bounds the checks New makes on the server
	// (maxmemory-policy on every master). Defaults to 10s.
	CheckTimeout time.Duration
}

// WithDefaults returns a copy of c with every zero field set to its default.
// It is safe to call on a nil receiver.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Prefix == "" {
		out.Prefix = prefixDefault
	}
	if out.WaitTimeout == 0 {
		out.WaitTimeout = waitTimeoutDefault
	}
	if out.CheckTimeout == 0 {
		out.CheckTimeout = checkTimeoutDefault
	}
	return &out
}

func (c *Config) validate() error {
	var errs []error
	if strings.ContainsAny(c.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("Config.Prefix %q contains '{' or '}' (the key's hash tag follows it)", c.Prefix))
	}
	if c.WaitReplicas < 0 {
		errs = append(errs, fmt.Errorf("Config.WaitReplicas %d is negative", c.WaitReplicas))
	}
	if c.WaitTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.WaitTimeout %v is negative", c.WaitTimeout))
	}
	if c.CheckTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.CheckTimeout %v is negative", c.CheckTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("idemkit/server/redisstore: invalid config: %w", err)
	}
	return nil
}
