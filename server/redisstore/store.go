package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// Store is a server.Store in Redis, for lease mode (server.ModeLease) only.
// It works on a single server, a Sentinel failover client and a Redis
// Cluster: every record is one key whose hash tag is a hash of its scope.
//
// Redis's clock decides leases and expiry: the scripts read TIME and take
// only durations from the caller (LockedUntil and ExpiresAt minus Now).
// A record's key expires with its window (PEXPIRE), so Sweep has nothing to
// do.
//
// Errors are translated at the boundary: a connection failure, a timeout
// reading the reply, CLUSTERDOWN, LOADING, READONLY, MASTERDOWN, MOVED and
// ASK are server.ErrStoreUnavailable, BUSY and TRYAGAIN server.ErrStoreBusy,
// OOM (maxmemory reached under noeviction) server.ErrStoreFull, each
// wrapping the go-redis error.
type Store struct {
	client redis.UniversalClient
	cfg    *Config
	held   heldClaims
	// callerClock makes the scripts use the callers' times (tests only).
	callerClock bool
}

var _ server.Store = (*Store)(nil)

// New returns a store on client; cfg may be nil. Unless
// Config.AllowEviction is set, New reads INFO memory from the server (every
// master of a cluster) and returns an *EvictionPolicyError when one's
// maxmemory-policy is not noeviction, within Config.CheckTimeout; it fails
// too when the server cannot be read then.
//
// client is what redis.NewClient, NewFailoverClient, NewClusterClient,
// NewFailoverClusterClient, NewUniversalClient or NewRing return: the check
// and Evictions reach every master through the concrete type, and refuse
// another implementation of redis.UniversalClient.
func New(client redis.UniversalClient, cfg *Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("idemkit/server/redisstore: New: client is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, ok := client.(*redis.Ring); ok && cfg.WaitReplicas > 0 {
		return nil, errors.New("idemkit/server/redisstore: invalid config: Config.WaitReplicas is not supported on a redis.Ring")
	}
	s := &Store{client: client, cfg: cfg}
	if !cfg.AllowEviction {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.CheckTimeout)
		defer cancel()
		if err := s.checkEvictionPolicy(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// key returns the key of the record of sc: Config.Prefix, then a hash tag
// holding 32 base64url characters of a SHA-256 over the length-prefixed
// scope. Any bytes may appear in a scope; the key holds none of them.
func (s *Store) key(sc server.Scope) string {
	h := sha256.New()
	for _, part := range []string{sc.Principal, sc.Endpoint, sc.Key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return s.cfg.Prefix + "{" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24]) + "}"
}

// nowArg is ARGV[1] of the scripts: 0 (Redis's TIME), or now with a caller
// clock.
func (s *Store) nowArg(now time.Time) int64 {
	if s.callerClock {
		return now.UnixMilli()
	}
	return 0
}

// Claim claims req.Scope in one script: a fresh or expired record is
// claimed with the next token, an in-progress record whose lease ended by
// Redis's clock is taken over when the fingerprint matches; otherwise the
// live record is returned. With Config.WaitReplicas, see there.
func (s *Store) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	if err := sqlstore.ValidateClaimRequest(req); err != nil {
		return server.ClaimResult{}, err
	}
	key := s.key(req.Scope)
	id := newClaimID()
	args := []any{
		s.nowArg(req.Now),
		req.LockedUntil.Sub(req.Now).Milliseconds(),
		max(req.ExpiresAt.Sub(req.Now).Milliseconds(), 1),
		req.Fingerprint,
		req.FingerprintVersion,
		id,
		s.held.floor(key),
	}
	out, err := s.runClaim(ctx, key, args)
	if err != nil {
		return server.ClaimResult{}, interpretError(err)
	}
	if len(out) < 2 {
		return server.ClaimResult{}, fmt.Errorf("idemkit/server/redisstore: claim script returned %d values", len(out))
	}
	if acquired, _ := out[0].(int64); acquired == 1 {
		token, _ := out[1].(int64)
		takenOver := len(out) > 2 && out[2] == int64(1)
		s.held.add(key, token, id, req.ExpiresAt, req.Now)
		return server.ClaimResult{Acquired: true, Token: token, TakenOver: takenOver}, nil
	}
	rec, err := decodeRecord(req.Scope, out[2:])
	if err != nil {
		return server.ClaimResult{}, err
	}
	return server.ClaimResult{Existing: rec}, nil
}

// runClaim runs claimScript, followed by WAIT on the same connection when
// Config.WaitReplicas is set.
func (s *Store) runClaim(ctx context.Context, key string, args []any) ([]any, error) {
	if s.cfg.WaitReplicas == 0 {
		return claimScript.Run(ctx, s.client, []string{key}, args...).Slice()
	}
	var conn redis.Cmdable = s.client
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		conn = master
	}
	var (
		eval *redis.Cmd
		wait *redis.Cmd
	)
	pipe := func(p redis.Pipeliner) error {
		eval = claimScript.EvalSha(ctx, p, []string{key}, args...)
		wait = p.Do(ctx, "WAIT", s.cfg.WaitReplicas, s.cfg.WaitTimeout.Milliseconds())
		return nil
	}
	_, err := conn.Pipelined(ctx, pipe)
	if err != nil && redis.HasErrorPrefix(eval.Err(), "NOSCRIPT") {
		if err := claimScript.Load(ctx, conn).Err(); err != nil {
			return nil, err
		}
		_, err = conn.Pipelined(ctx, pipe)
	}
	if err != nil {
		return nil, err
	}
	out, err := eval.Slice()
	if err != nil {
		return nil, err
	}
	acked, waitErr := wait.Int64()
	if len(out) < 2 || out[0] != int64(1) || (waitErr == nil && acked >= int64(s.cfg.WaitReplicas)) {
		return out, nil
	}
	// Acquired, but not known to be on enough replicas: give it back.
	token, _ := out[1].(int64)
	id, _ := args[5].(string)
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WaitTimeout)
	defer cancel()
	relErr := releaseScript.Run(relCtx, s.client, []string{key}, 0, token, id).Err()
	if waitErr != nil {
		return nil, errors.Join(waitErr, relErr)
	}
	return nil, errors.Join(fmt.Errorf("%w (%w): %d of %d replicas acknowledged within %v",
		ErrReplicasBehind, server.ErrStoreUnavailable, acked, s.cfg.WaitReplicas, s.cfg.WaitTimeout), relErr)
}

// Complete stores resp for the claim this Store acquired with token, and
// marks the record completed. It returns server.ErrLeaseLost if the claim
// is no longer current: taken over, expired, released, lost by Redis, or
// not acquired by this Store. Complete may be retried after an error: when
// the first call stored the response and only its reply was lost, the
// retry returns nil.
func (s *Store) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	if err := validateResponse(resp); err != nil {
		return err
	}
	omitted := "0"
	if resp.BodyOmitted {
		omitted = "1"
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	header, err := sqlstore.EncodeHeader(resp.Header)
	if err != nil {
		return err
	}
	return s.held1(ctx, completeScript, sc, token, true, s.nowArg(now), resp.Status, header, body, omitted)
}

// ExtendLease sets the lease end of the claim held with token to Redis's
// clock plus lease. It returns server.ErrLeaseLost if the claim is no
// longer current.
func (s *Store) ExtendLease(ctx context.Context, sc server.Scope, token int64, now time.Time, lease time.Duration) error {
	return s.held1(ctx, extendScript, sc, token, false, s.nowArg(now), lease.Milliseconds())
}

// Release deletes the in-progress claim held with token, so that a retry
// runs the handler again. It returns server.ErrLeaseLost if the claim is
// not current.
func (s *Store) Release(ctx context.Context, sc server.Scope, token int64) error {
	return s.held1(ctx, releaseScript, sc, token, true, 0)
}

// held1 runs script on the claim (sc, token) with ARGV now, token, claim id,
// rest...; the claim is forgotten when the script refuses it, or when it
// succeeds and ends is true.
func (s *Store) held1(ctx context.Context, script *redis.Script, sc server.Scope, token int64, ends bool, now any, rest ...any) error {
	if err := sqlstore.ValidateScope(sc); err != nil {
		return err
	}
	key := s.key(sc)
	id, ok := s.held.id(key, token)
	if !ok {
		return fmt.Errorf("%w: this store holds no claim with token %d", server.ErrLeaseLost, token)
	}
	args := append([]any{now, token, id}, rest...)
	n, err := script.Run(ctx, s.client, []string{key}, args...).Int64()
	if err != nil {
		return interpretError(err)
	}
	if n != 1 {
		s.held.remove(key, token)
		return server.ErrLeaseLost
	}
	if ends {
		s.held.remove(key, token)
	}
	return nil
}

// Get returns the live record of sc by Redis's clock, or
// server.ErrRecordNotFound.
func (s *Store) Get(ctx context.Context, sc server.Scope, now time.Time) (*server.Record, error) {
	if err := sqlstore.ValidateScope(sc); err != nil {
		return nil, err
	}
	out, err := getScript.Run(ctx, s.client, []string{s.key(sc)}, s.nowArg(now)).Slice()
	if err != nil {
		return nil, interpretError(err)
	}
	if len(out) < 2 {
		return nil, server.ErrRecordNotFound
	}
	return decodeRecord(sc, out[1:])
}

// BeginTx returns ErrLeaseOnly: Redis cannot share a transaction with the
// handler's effect.
func (s *Store) BeginTx(ctx context.Context, lockTimeout time.Duration) (server.StoreTx, error) {
	return nil, ErrLeaseOnly
}

// Sweep returns 0: Redis deletes each record when its key's TTL, the
// window, runs out. It returns ctx's error if ctx is done.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	return 0, ctx.Err()
}

// decodeRecord reads the fields of a record's HGETALL.
func decodeRecord(sc server.Scope, kv []any) (*server.Record, error) {
	f := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		v, _ := kv[i+1].(string)
		f[k] = v
	}
	bad := func(field string, err error) error {
		return fmt.Errorf("idemkit/server/redisstore: record field %q unreadable: %w", field, err)
	}
	num := func(field string) (int64, error) {
		v, ok := f[field]
		if !ok {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, bad(field, err)
		}
		return n, nil
	}
	var nums [6]int64
	for i, field := range []string{"fv", "tok", "lu", "ca", "ea", "rs"} {
		n, err := num(field)
		if err != nil {
			return nil, err
		}
		nums[i] = n
	}
	rec := &server.Record{
		Scope:              sc,
		Fingerprint:        []byte(f["fp"]),
		FingerprintVersion: int(nums[0]),
		Token:              nums[1],
		CreatedAt:          time.UnixMilli(nums[3]).UTC(),
		ExpiresAt:          time.UnixMilli(nums[4]).UTC(),
	}
	switch f["st"] {
	case "p":
		rec.State = server.StateInProgress
		rec.LockedUntil = time.UnixMilli(nums[2]).UTC()
	case "c":
		rec.State = server.StateCompleted
		h, err := sqlstore.DecodeHeader([]byte(f["rh"]))
		if err != nil {
			return nil, bad("rh", err)
		}
		rec.Response = &server.StoredResponse{
			Status:      int(nums[5]),
			Header:      h,
			Body:        []byte(f["rb"]),
			BodyOmitted: f["ro"] == "1",
		}
	default:
		return nil, bad("st", fmt.Errorf("unknown state %q", f["st"]))
	}
	return rec, nil
}

// validateResponse returns an error if resp cannot be stored.
func validateResponse(resp *server.StoredResponse) error {
	switch {
	case resp == nil:
		return errors.New("idemkit/server/redisstore: StoredResponse is nil")
	case resp.Status < 100 || resp.Status > 999:
		return fmt.Errorf("idemkit/server/redisstore: StoredResponse.Status %d is not an HTTP status", resp.Status)
	}
	return nil
}
