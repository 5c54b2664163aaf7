// Package redisstore is a server.Store in Redis (a single server, a
// Sentinel failover client or a Redis Cluster), for lease mode only. It is
// its own package so that only programs that use it link go-redis.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(client, nil) // refuses a maxmemory-policy other than noeviction
//	m, err := server.New(store, &server.Config{PrincipalFunc: principal}) // lease mode, the default
//
// Set ContextTimeoutEnabled on the client: without it go-redis ends a call
// on a frozen connection only after its ReadTimeout, not with the context
// the middleware bounds by Config.StoreTimeout.
//
// # Lease mode only: the dual write
//
// SET key value NX PX ttl is atomic and expires for free, but Redis has no
// relationship to the database where the handler writes its effect: the
// claim and the effect are two writes to two systems, and no transaction
// spans them. BeginTx returns ErrLeaseOnly, and transactional mode
// (server.ModeTransactional) cannot be used. A lease-mode handler makes its
// effect safe to repeat itself:
//
//   - forward server.ScopeFromContext(ctx).DownstreamKey() as the
//     idempotency key of the downstream call (a payment processor), or
//     write the effect under a unique constraint on that key in your own
//     database, so that a second run of the handler (after a takeover, or
//     after Redis lost the claim) finds the first run's effect instead of
//     making a second one;
//   - pass server.AttemptFromContext(ctx).Token to a downstream that
//     accepts fencing tokens, and reconcile when PreviousOutcomeUnknown is
//     set (see server.Attempt).
//
// # Scripts, clock and keys
//
// Claim, Complete, ExtendLease, Release and Get are Lua scripts (EVALSHA,
// loaded on demand) that compare fencing tokens and read Redis's TIME: the
// callers' clocks only give durations (the lease, the window), so servers
// whose clocks disagree cannot take over each other's live leases. The
// record of a scope is one hash under Config.Prefix + "{" + a hash of the
// scope + "}": every script touches one key, so one cluster slot, and the
// scope's bytes (braces, NUL, newlines) never reach the key. The key's TTL
// is the window, so Redis deletes expired records and Sweep returns 0.
//
// # Eviction
//
// A Redis that evicts keys under memory pressure (maxmemory-policy
// allkeys-lru and the like) deletes live records exactly when traffic is
// high, and a deleted record is a key that silently stopped deduplicating.
// New refuses such a server (every master of a cluster) with an
// *EvictionPolicyError unless Config.AllowEviction is set, and
// Store.Evictions returns the server's evicted_keys so that an alert can
// fire on any increase. Under noeviction a full Redis refuses writes (OOM):
// a claim then fails with server.ErrStoreFull and the request is answered
// 503, fail closed.
//
// # Losing data: restarts without persistence, failovers
//
// A Redis restarted without persistence (no AOF; RDB snapshots are
// minutes old) or failed over to a replica that had not received a claim
// forgets the claims it held. What happens then:
//
//   - a request whose claim was lost is in flight as if never claimed: its
//     retry claims again and runs the handler a second time, possibly on
//     another server. This is the dual-write case above, and the downstream
//     key is what keeps the effect single. Completed records lost the same
//     way are replayed no more: a retry runs the handler again too.
//   - the new claim's fencing token starts again at 1. The first run's
//     completion, extension or release is still refused: each claim
//     writes a random claim id into its record and the Store that acquired
//     it sends that id with the token, so a holder whose record is gone
//     cannot complete over a new claim that happens to have the same token.
//     A Store that still holds a claim of the scope claims it again with a
//     higher token, so the tokens one Store hands out for a scope keep
//     increasing; across Stores (replicas of your service) the token may
//     repeat after a loss, and a downstream fencing by token alone cannot
//     tell those two runs apart (the downstream key can).
//
// Config.WaitReplicas makes each claim wait (WAIT) until that many
// replicas hold it, so that a failover to one of them keeps it; Redis's
// replication stays asynchronous, so a failover can still lose a claim
// acknowledged by fewer replicas, and a completion is not waited for.
// Turn on AOF with appendfsync everysec (at most about a second of writes
// lost) or always if restarts must keep live claims.
//
// # What it does not do
//
// Per-principal quotas (server.Config.MaxKeysPerPrincipal,
// MaxStoredBytesPerPrincipal) need a count of a principal's records across
// the whole store, which a cluster spreads over every slot; Store has no
// PrincipalUsage method and server.New refuses a quota with this store.
// A redis.Ring is accepted without WaitReplicas, but a Ring reshards keys
// when a shard is added or lost, which forgets claims like a restart.
//
// Store has no InFlight listing either, so package server/recoverer (which
// finishes the lapsed claims of dead holders) refuses it with
// recoverer.ErrNoListing. Each record is one hash under one key, so every
// script touches one slot; an index of the in-flight claims would be a
// second key, in another slot of a cluster (or, hash-tagged, one slot for
// the whole store), and the records Redis expires by TTL would leave
// stale entries in it. With Redis, a dead holder's claim is finished by
// the client's retry, which takes it over once its lease lapses.
package redisstore
