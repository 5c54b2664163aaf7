package server

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"log/slog"
	"net/http"
	"time"
)

// State is the state of an idempotency record.
type State string

const (
	// StateInProgress: a claim is held and the handler has not finished. In
	// lease mode the row is committed and LockedUntil bounds the claim; in
	// transactional mode the row is never visible in this state to other
	// transactions (it commits completed, or not at all).
	StateInProgress State = "in_progress"
	// StateCompleted: the response is stored and every duplicate replays it.
	StateCompleted State = "completed"
)

// Scope identifies one record: who sent the key, to which operation, and the
// key itself. Principal is mandatory. Endpoint is "*" by default (a
// key belongs to the principal), or the operation name a route gives with
// Operation or Config.EndpointFunc.
type Scope struct {
	Principal string
	Endpoint  string
	Key       string
}

// DownstreamKey returns an idempotency key for calls the handler makes to a
// downstream service on behalf of this request, such as a payment
// processor: "idk_" and 32 base64url characters of a SHA-256 over the whole
// scope. Forward it rather than s.Key. The downstream usually sees one
// account for all of your principals, so the bare client key would merge two
// tenants who chose the same key string into one downstream effect; this key
// differs for every (principal, endpoint, key) and is the same on every
// retry and takeover of one request.
func (s Scope) DownstreamKey() string {
	h := sha256.New()
	for _, part := range []string{"idemkit-downstream-v1", s.Principal, s.Endpoint, s.Key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return "idk_" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:24])
}

// endpointAny is the Endpoint of a Scope whose route names no operation:
// the key belongs to the principal, whatever route it is sent to.
const endpointAny = "*"

// StoredResponse is what a replay sends: the status, the allowlisted headers
// and the body, byte for byte.
type StoredResponse struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted is true when the body was larger than the storage cap and
	// was passed through to the first caller but not stored. A replay then
	// sends the status and headers with an empty body and the header
	// Idempotent-Response-Omitted: true; it never runs the handler again.
	BodyOmitted bool
}

// Record is one row of the idempotency store.
type Record struct {
	Scope
	State              State
	Fingerprint        []byte // SHA-256 of the canonical request, never the request
	FingerprintVersion int
	// Token is the fencing token of the current claim. It starts at 1 and
	// grows by one at every takeover (an expired lease, or an expired record
	// claimed anew).
	Token       int64
	LockedUntil time.Time // lease end; meaningful while State is StateInProgress
	Response    *StoredResponse
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// ClaimRequest asks the store to claim a scope.
type ClaimRequest struct {
	Scope
	Fingerprint        []byte
	FingerprintVersion int
	// Now is the time of the claim. sqlitestore.Store, a single-host store whose
	// processes all read one clock, compares it with expires_at and
	// locked_until. pgstore.Store, shared by replicas whose clocks may
	// disagree, uses the database's clock_timestamp() instead and takes
	// from Now only the distances to LockedUntil (the lease) and ExpiresAt
	// (the window).
	Now time.Time
	// ExpiresAt is Now plus the retention window.
	ExpiresAt time.Time
	// LockedUntil is the end of the lease (lease mode), or Now plus the lock
	// timeout (transactional mode).
	LockedUntil time.Time
}

// ClaimResult is the outcome of a claim.
type ClaimResult struct {
	// Acquired is true when this caller now owns the scope: no live record
	// existed, the existing record had expired, or its in-progress lease had
	// run out and its fingerprint matched (a takeover).
	Acquired bool
	// Token is the fencing token of the acquired claim.
	Token int64
	// TakenOver is true when Acquired came from an in-progress record whose
	// lease had run out.
	TakenOver bool
	// Existing is the live record that prevented the claim, when Acquired is
	// false. It is never an expired record.
	Existing *Record
	// LeaseDelay is how much later than req.Now, by the caller's clock, the
	// store started the lease and the window of an acquired claim: a store
	// that waited for a lock before it claimed, and moved req's times by
	// the wait so that a short lease cannot lapse in the queue
	// (sqlitestore.Store), reports the wait here. The lease then ends at
	// req.LockedUntil plus LeaseDelay. The middleware counts its own
	// deadline from before req.Now plus LeaseDelay, so a store must never
	// report more than it moved. Zero when the store counts from req.Now or
	// from its own clock at the time it received the claim.
	LeaseDelay time.Duration
}

// Store is where idempotency records live. pgstore.Store and sqlitestore.Store
// implement it; the conformance suite in package storetest checks any other
// implementation against the same contract.
//
// Every method takes the caller's time explicitly; a record whose ExpiresAt
// is not after now is treated as absent by every method. A store shared by
// several hosts should decide by one clock, its own, rather than the
// callers' (pgstore.Store does): the caller's now then only anchors
// durations.
type Store interface {
	// Claim claims req.Scope in one atomic statement (insert, or overwrite an
	// expired row, or take over a lapsed lease with a matching fingerprint)
	// and commits it. When it does not acquire, it returns the live record.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// Complete stores resp for a claim held with token and marks the record
	// completed. It returns ErrLeaseLost if the token is no longer current.
	Complete(ctx context.Context, s Scope, token int64, now time.Time, resp *StoredResponse) error
	// Release deletes an in-progress claim held with token, so a retry runs
	// the handler again. It returns ErrLeaseLost if the token is not current.
	Release(ctx context.Context, s Scope, token int64) error
	// ExtendLease sets locked_until of an in-progress claim held with token
	// to now plus lease (pgstore.Store: the database's clock plus lease).
	// It returns ErrLeaseLost if the token is not current.
	ExtendLease(ctx context.Context, s Scope, token int64, now time.Time, lease time.Duration) error
	// Get returns the live record for s, or ErrRecordNotFound.
	Get(ctx context.Context, s Scope, now time.Time) (*Record, error)
	// BeginTx starts a transaction for transactional mode. A wait longer than
	// lockTimeout on a concurrent, uncommitted claim of the same scope makes
	// the claim fail with ErrInFlight.
	BeginTx(ctx context.Context, lockTimeout time.Duration) (StoreTx, error)
	// Sweep deletes records that expired SweepGrace or more before now
	// (ExpiresAt not after now minus SweepGrace), in chunks, and returns
	// how many it deleted. The store keeps the grace itself: a caller
	// passes the time it reads, never an earlier one to make room.
	Sweep(ctx context.Context, now time.Time) (int, error)
}

// SweepGrace is how long after its expiry every Store keeps a record from
// Store.Sweep. A request reads the clock before its claim reaches the
// store; a record that expires in between is still the key's, and the
// claim must find it (a replay) rather than insert a fresh claim and run
// the handler again. The grace bounds that gap, far beyond any claim's
// StoreTimeout.
const SweepGrace = time.Minute

// StoreTx is a transaction in transactional mode: the claim, the handler's
// effect and the stored response commit together, or not at all.
type StoreTx interface {
	// Claim is Store.Claim inside the transaction; nothing is committed.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)
	// Complete is Store.Complete inside the transaction. A store may send it
	// with the COMMIT (pgstore.Store does, saving a round trip): Commit then
	// returns its error, ErrLeaseLost included, having rolled back.
	Complete(ctx context.Context, s Scope, token int64, now time.Time, resp *StoredResponse) error
	Commit(ctx context.Context) error
	// Rollback aborts the transaction. It is safe to call after Commit. A
	// canceled ctx must not stop it: the store bounds it itself (by ctx's
	// deadline, if any, or a timeout of its own).
	Rollback(ctx context.Context) error
	// Handle is the driver transaction the handler writes its effect on: a
	// pgx.Tx for pgstore.Store, a *sql.Tx for sqlitestore.Store; handlers
	// reach it with the driver package's Tx(ctx), or TxHandle.
	Handle() any
}

func scopeAttrs(s Scope, extra ...slog.Attr) []slog.Attr {
	return append([]slog.Attr{
		slog.String("principal", s.Principal), slog.String("endpoint", s.Endpoint), slog.String("key", s.Key),
	}, extra...)
}
