package server

import (
	"context"
	"sync/atomic"
)

type ctxKey int

const (
	ctxKeyRequest ctxKey = iota // *requestValues
	ctxKeyRoute                 // routeOptions
)

// requestValues is what the middleware puts in the context of a request it
// runs a handler for, under one key (one allocation, not one per value):
// the scope and the not-stored mark before the claim, the attempt and the
// transaction when the claim is won, all before the handler runs. Nothing
// writes them after the handler has started, except the handler itself
// through MarkNotStored.
type requestValues struct {
	scope     Scope
	notStored atomic.Bool
	claimed   bool // attempt is set
	attempt   Attempt
	tx        any // StoreTx.Handle of a transactional request
}

// withRequestValues returns ctx carrying v.
func withRequestValues(ctx context.Context, v *requestValues) context.Context {
	return context.WithValue(ctx, ctxKeyRequest, v)
}

// requestValuesOf returns the values the middleware put in ctx, nil
// outside the middleware.
func requestValuesOf(ctx context.Context) *requestValues {
	v, _ := ctx.Value(ctxKeyRequest).(*requestValues)
	return v
}

// claim records the claim the handler will run under.
func (v *requestValues) claim(a Attempt, tx any) {
	v.attempt, v.tx, v.claimed = a, tx, true
}

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
	if v := requestValuesOf(ctx); v != nil && v.claimed {
		return v.attempt, true
	}
	return Attempt{}, false
}

// ScopeFromContext returns the scope (principal, endpoint and key) of the
// request the middleware is running a handler for. Lease-mode handlers
// forward Scope.DownstreamKey() to downstream services as their idempotency
// key, so that a takeover after a crash repeats the downstream call safely
// (not Scope.Key: a downstream shared by all principals would merge two
// tenants' calls that happen to use the same key string).
func ScopeFromContext(ctx context.Context) (Scope, bool) {
	if v := requestValuesOf(ctx); v != nil {
		return v.scope, true
	}
	return Scope{}, false
}

// TxHandle returns StoreTx.Handle of the transaction of a
// transactional-mode request: the driver transaction its handler writes
// its effect on. Driver packages return it typed (pgstore.Tx,
// sqlitestore.Tx).
func TxHandle(ctx context.Context) (any, bool) {
	if v := requestValuesOf(ctx); v != nil && v.tx != nil {
		return v.tx, true
	}
	return nil, false
}
