package server

import "context"

type ctxKey int

const (
	ctxKeyScope ctxKey = iota
	ctxKeyTx
	ctxKeyAttempt
	ctxKeyRoute
	ctxKeyNotStored
)

// Attempt describes the claim a handler runs under; see AttemptFromContext.
type Attempt struct {
	// Token is the fencing token of the claim: 1 for the first attempt,
	// one more at every takeover. Pass it to a downstream that accepts
	// fencing tokens (write only if the token is newer than the last one
	// it saw) so that a late, superseded attempt cannot overwrite a newer
	// one's effect.
	Token int64
	// PreviousOutcomeUnknown is true when this attempt took the claim over
	// from an earlier attempt whose lease ran out before it stored an
	// outcome: that attempt's process died or lost the store, and its
	// effect may or may not have happened. Before acting, reconcile with the
	// downstream under Scope.DownstreamKey (which the earlier attempt used
	// too): look the effect up, or repeat the call with that key so the
	// downstream deduplicates it.
	PreviousOutcomeUnknown bool
	// PreviousToken is the fencing token of that earlier attempt when
	// PreviousOutcomeUnknown is true, and 0 otherwise.
	PreviousToken int64
}

// AttemptFromContext returns the claim the middleware runs the handler
// under: its fencing token and whether an earlier attempt's outcome is
// unknown. In lease mode the handler's context is canceled, with
// context.Cause ErrLeaseLost, once the middleware knows its lease is lost
// (taken over, or run out because the store could not be reached): stop
// acting on the claim then.
func AttemptFromContext(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(ctxKeyAttempt).(Attempt)
	return a, ok
}

// ScopeFromContext returns the scope (principal, endpoint and key) of the
// request the middleware is running a handler for. Lease-mode handlers
// forward Scope.DownstreamKey() to downstream services as their idempotency
// key, so that a takeover after a crash repeats the downstream call safely
// (not Scope.Key: a downstream shared by all principals would merge two
// tenants' calls that happen to use the same key string).
func ScopeFromContext(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(ctxKeyScope).(Scope)
	return s, ok
}

// TxHandle returns StoreTx.Handle of the transaction of a
// transactional-mode request: the driver transaction its handler writes
// its effect on. Driver packages return it typed (pgstore.Tx,
// sqlitestore.Tx).
func TxHandle(ctx context.Context) (any, bool) {
	h := ctx.Value(ctxKeyTx)
	return h, h != nil
}
