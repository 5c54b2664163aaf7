package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/server"
)

// ErrLeaseOnly is returned by Store.BeginTx: a Redis store cannot take part
// in the handler's database transaction, so it serves lease mode
// (server.ModeLease) only.
var ErrLeaseOnly = errors.New("idemkit/server/redisstore: Redis has no transaction shared with the handler's effect; use lease mode")

// ErrReplicasBehind is returned by Claim when Config.WaitReplicas replicas
// did not acknowledge the claim within Config.WaitTimeout. It matches
// server.ErrStoreUnavailable too; the claim has been released.
var ErrReplicasBehind = errors.New("idemkit/server/redisstore: too few replicas acknowledged the claim")

// EvictionPolicyError is returned by New when a master's maxmemory-policy
// is not noeviction and Config.AllowEviction is false.
type EvictionPolicyError struct {
	Addr   string // the master, or "" for a single server
	Policy string // its maxmemory-policy
}

func (e *EvictionPolicyError) Error() string {
	at := ""
	if e.Addr != "" {
		at = " on " + e.Addr
	}
	return fmt.Sprintf("idemkit/server/redisstore: maxmemory-policy is %q%s, want noeviction: "+
		"an evicted key silently stops deduplicating its requests (set maxmemory-policy noeviction, or Config.AllowEviction to accept the risk)",
		e.Policy, at)
}

// interpretError translates a go-redis error into the store contract's
// errors, wrapping the cause so that errors.Is finds both.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "OOM "):
			return fmt.Errorf("%w: %w", server.ErrStoreFull, err)
		case strings.HasPrefix(msg, "BUSY "), strings.HasPrefix(msg, "TRYAGAIN"):
			return fmt.Errorf("%w: %w", server.ErrStoreBusy, err)
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "CLUSTERDOWN"),
			strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "READONLY"),
			strings.HasPrefix(msg, "MOVED"), strings.HasPrefix(msg, "ASK"):
			return fmt.Errorf("%w: %w", server.ErrStoreUnavailable, err)
		}
		return err
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: %w", server.ErrStoreUnavailable, err)
	}
	return err
}
