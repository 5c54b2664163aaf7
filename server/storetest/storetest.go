// Package storetest is the conformance suite for implementations of
// server.Store. pgstore.Store and sqlitestore.Store run it; so should any other
// store:
//
//	func TestMyStore(t *testing.T) {
//		t.Parallel()
//		storetest.Run(t, func(t *testing.T) server.Store {
//			return newMigratedEmptyStore(t)
//		})
//	}
//
// Every case runs in parallel on a store of its own. Times in the suite are
// whole milliseconds, the coarsest precision a store may keep.
package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
)

// SweepRows is how many expired rows the Sweep case creates. newStore should
// configure a sweep chunk size well below it (3, say), so that the case
// proves Sweep loops over chunks.
const SweepRows = 10

// LockTimeout is the lock timeout the transactional cases pass to BeginTx.
const LockTimeout = 200 * time.Millisecond

// Concurrency is how many goroutines claim one scope at once.
const Concurrency = 64

// Run runs the conformance suite. newStore must return a fresh, migrated
// store that no other test uses; it is called once per case, from the
// case's own (parallel) test.
func Run(t *testing.T, newStore func(t *testing.T) server.Store) {
	t.Helper()
	RunWith(t, Capabilities{}, newStore)
}

// Capabilities are the parts of the contract a store may leave out. Run
// assumes none is left out.
type Capabilities struct {
	// LeaseOnly: the store serves lease mode only and BeginTx returns an
	// error (redisstore.Store). The transactional cases are replaced by
	// one that requires that error.
	LeaseOnly bool
	// SelfExpiring: the store deletes expired records itself (a TTL) and
	// Sweep returns 0 (redisstore.Store). The cases that count Sweep's
	// deletions (Sweep_DeletesOnlyExpired and Sweep_KeepsGrace) are replaced
	// by one that requires 0 and no error. The grace a sweep keeps guards a
	// store whose claims decide by the caller's clock against a delete that
	// decides by another; a store whose every script decides liveness and
	// expiry by its own clock (Redis's TIME and TTL) has no such gap.
	SelfExpiring bool
}

// RunWith is like Run, for a store that leaves out the parts of the
// contract caps names. The cases left out are not run (not skipped).
func RunWith(t *testing.T, caps Capabilities, newStore func(t *testing.T) server.Store) {
	t.Helper()
	all := slices.Clone(cases)
	if caps.LeaseOnly {
		all = append(all, leaseOnlyCase)
	}
	if caps.SelfExpiring {
		all = append(all, selfExpiringCase)
	}
	for _, c := range all {
		if caps.LeaseOnly && strings.HasPrefix(c.name, "Tx_") || caps.SelfExpiring && (c.name == "Sweep_DeletesOnlyExpired" || c.name == "Sweep_KeepsGrace") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newBundle(t, newStore))
		})
	}
}

var leaseOnlyCase = testCase{"BeginTx_LeaseOnlyRefuses", func(t *testing.T, b *testBundle) {
	tx, err := b.store.BeginTx(b.ctx, LockTimeout)
	require.Error(t, err)
	require.Nil(t, tx)
}}

var selfExpiringCase = testCase{"Sweep_SelfExpiringDeletesNothing", func(t *testing.T, b *testBundle) {
	sc := scope("self-expiring")
	b.mustAcquire(t, claimReq(sc, fingerprint("body"), b.t0))
	n, err := b.store.Sweep(b.ctx, b.t0.Add(2*Window))
	require.NoError(t, err)
	require.Equal(t, 0, n)
	_, err = b.store.Get(b.ctx, sc, b.t0)
	require.NoError(t, err, "Sweep of a self-expiring store deletes nothing")
}}

type testBundle struct {
	store server.Store
	ctx   context.Context
	t0    time.Time
}

func newBundle(t *testing.T, newStore func(t *testing.T) server.Store) *testBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return &testBundle{
		store: newStore(t),
		ctx:   ctx,
		t0:    time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC),
	}
}

// Lease is the lease the suite's claims take.
const Lease = 10 * time.Second

// Window is the retention window of the suite's claims.
const Window = 24 * time.Hour

func scope(key string) server.Scope {
	return server.Scope{Principal: "tenant-a", Endpoint: "POST /payments", Key: key}
}

func fingerprint(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func claimReq(sc server.Scope, fp []byte, now time.Time) server.ClaimRequest {
	return server.ClaimRequest{
		Scope:              sc,
		Fingerprint:        fp,
		FingerprintVersion: 1,
		Now:                now,
		ExpiresAt:          now.Add(Window),
		LockedUntil:        now.Add(Lease),
	}
}

func (b *testBundle) claim(t *testing.T, req server.ClaimRequest) server.ClaimResult {
	t.Helper()
	res, err := b.store.Claim(b.ctx, req)
	require.NoError(t, err)
	return res
}

func (b *testBundle) mustAcquire(t *testing.T, req server.ClaimRequest) int64 {
	t.Helper()
	res := b.claim(t, req)
	require.True(t, res.Acquired, "claim of %v: got Existing %+v, want Acquired", req.Scope, res.Existing)
	require.Nil(t, res.Existing)
	return res.Token
}

// sampleResponse has the parts a replay must keep exactly: a body that is not
// UTF-8, a header with several values, and a header value that is not text.
func sampleResponse() *server.StoredResponse {
	return &server.StoredResponse{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/octet-stream"},
			"Location":     {"/payments/pay_123"},
			"Vary":         {"Accept", "Accept-Encoding"},
			"X-Binary":     {"\xff\xfe\x00raw"},
			"X-Html":       {"<a href=\"x\">&</a>"},
		},
		Body: []byte{0x00, 0xff, 0xfe, 'o', 'k', 0xc3, 0x28, '\n', 0x80},
	}
}

func requireSameResponse(t *testing.T, want, got *server.StoredResponse) {
	t.Helper()
	require.NotNil(t, got, "got no stored response")
	require.Equal(t, want.Status, got.Status, "status")
	require.Equal(t, want.BodyOmitted, got.BodyOmitted, "BodyOmitted")
	require.Equal(t, len(want.Body), len(got.Body), "body length")
	if len(want.Body) > 0 {
		require.Equal(t, want.Body, got.Body, "body bytes")
	}
	require.Equal(t, len(want.Header), len(got.Header), "header count: got %v want %v", got.Header, want.Header)
	for name, vals := range want.Header {
		require.Equal(t, vals, got.Header[name], "header %q", name)
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, b *testBundle)
}

var cases = []testCase{
	{"Claim_Fresh", func(t *testing.T, b *testBundle) {
		sc := scope("fresh")
		req := claimReq(sc, fingerprint("body"), b.t0)
		res := b.claim(t, req)
		require.True(t, res.Acquired)
		require.False(t, res.TakenOver)
		require.Equal(t, int64(1), res.Token)
		require.Nil(t, res.Existing)

		rec, err := b.store.Get(b.ctx, sc, b.t0)
		require.NoError(t, err)
		require.Equal(t, sc, rec.Scope)
		require.Equal(t, server.StateInProgress, rec.State)
		require.Equal(t, req.Fingerprint, rec.Fingerprint)
		require.Equal(t, 1, rec.FingerprintVersion)
		require.Equal(t, int64(1), rec.Token)
		require.True(t, req.LockedUntil.Equal(rec.LockedUntil), "LockedUntil: got %v want %v", rec.LockedUntil, req.LockedUntil)
		require.True(t, b.t0.Equal(rec.CreatedAt), "CreatedAt: got %v want %v", rec.CreatedAt, b.t0)
		require.True(t, req.ExpiresAt.Equal(rec.ExpiresAt), "ExpiresAt: got %v want %v", rec.ExpiresAt, req.ExpiresAt)
		require.Nil(t, rec.Response)
	}},
	{"Claim_LeaseDelayNeverMoreThanMoved", func(t *testing.T, b *testBundle) {
		// Concurrent claims of distinct scopes may queue for a lock; a
		// store that starts a lease later than req.Now reports by how much
		// in LeaseDelay, and never more than it moved the lease: the
		// middleware cancels the handler by req.LockedUntil plus LeaseDelay.
		type claimed struct {
			req server.ClaimRequest
			res server.ClaimResult
			err error
		}
		out := make(chan claimed, Concurrency)
		for i := range Concurrency {
			go func() {
				req := claimReq(scope(fmt.Sprintf("delay-%d", i)), fingerprint("body"), b.t0)
				res, err := b.store.Claim(b.ctx, req)
				out <- claimed{req, res, err}
			}()
		}
		for range Concurrency {
			c := <-out
			require.NoError(t, c.err)
			require.True(t, c.res.Acquired)
			require.GreaterOrEqual(t, c.res.LeaseDelay, time.Duration(0))
			rec, err := b.store.Get(b.ctx, c.req.Scope, b.t0)
			require.NoError(t, err)
			granted := c.req.LockedUntil.Add(c.res.LeaseDelay).Truncate(time.Millisecond)
			require.False(t, rec.LockedUntil.Before(granted), "LockedUntil %v before req.LockedUntil+LeaseDelay %v", rec.LockedUntil, granted)
		}
	}},
	{"Get_NotFound", func(t *testing.T, b *testBundle) {
		_, err := b.store.Get(b.ctx, scope("never"), b.t0)
		require.ErrorIs(t, err, server.ErrRecordNotFound)
	}},
	{"Claim_InvalidRequest", func(t *testing.T, b *testBundle) {
		req := claimReq(scope("k"), fingerprint("body"), b.t0)
		req.Principal = ""
		_, err := b.store.Claim(b.ctx, req)
		require.Error(t, err)
		req = claimReq(scope("k"), fingerprint("body"), b.t0)
		req.ExpiresAt = b.t0
		_, err = b.store.Claim(b.ctx, req)
		require.Error(t, err)
	}},
	{"Claim_CompletedDuplicateReplaysResponse", func(t *testing.T, b *testBundle) {
		sc := scope("done")
		fp := fingerprint("body")
		token := b.mustAcquire(t, claimReq(sc, fp, b.t0))
		want := sampleResponse()
		require.NoError(t, b.store.Complete(b.ctx, sc, token, b.t0.Add(time.Second), want))

		res := b.claim(t, claimReq(sc, fp, b.t0.Add(2*time.Second)))
		require.False(t, res.Acquired)
		require.NotNil(t, res.Existing)
		require.Equal(t, server.StateCompleted, res.Existing.State)
		require.Equal(t, fp, res.Existing.Fingerprint)
		require.Equal(t, token, res.Existing.Token)
		requireSameResponse(t, want, res.Existing.Response)

		rec, err := b.store.Get(b.ctx, sc, b.t0.Add(3*time.Second))
		require.NoError(t, err)
		requireSameResponse(t, want, rec.Response)

		// A completed record is not taken over, even once its lease time
		// has long passed, and not by a different request either.
		res = b.claim(t, claimReq(sc, fingerprint("other"), b.t0.Add(time.Hour)))
		require.False(t, res.Acquired)
		require.Equal(t, server.StateCompleted, res.Existing.State)
		require.Equal(t, fp, res.Existing.Fingerprint)
	}},
	{"Complete_EmptyAndOmittedBody", func(t *testing.T, b *testBundle) {
		for i, want := range []*server.StoredResponse{
			{Status: http.StatusNoContent},
			{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, BodyOmitted: true},
			{Status: http.StatusUnprocessableEntity, Header: http.Header{}, Body: []byte{}},
		} {
			sc := scope(fmt.Sprintf("empty-%d", i))
			token := b.mustAcquire(t, claimReq(sc, fingerprint("body"), b.t0))
			require.NoError(t, b.store.Complete(b.ctx, sc, token, b.t0, want))
			rec, err := b.store.Get(b.ctx, sc, b.t0)
			require.NoError(t, err)
			requireSameResponse(t, want, rec.Response)
		}
	}},
	{"Claim_InProgressDuplicate", func(t *testing.T, b *testBundle) {
		sc := scope("busy")
		fp := fingerprint("body")
		first := claimReq(sc, fp, b.t0)
		token := b.mustAcquire(t, first)

		res := b.claim(t, claimReq(sc, fp, b.t0.Add(Lease-time.Millisecond)))
		require.False(t, res.Acquired)
		require.NotNil(t, res.Existing)
		require.Equal(t, server.StateInProgress, res.Existing.State)
		require.Equal(t, token, res.Existing.Token)
		require.True(t, first.LockedUntil.Equal(res.Existing.LockedUntil), "LockedUntil: got %v want %v", res.Existing.LockedUntil, first.LockedUntil)
		require.Nil(t, res.Existing.Response)
	}},
	{"Claim_ExpiredRecordIsAbsent", func(t *testing.T, b *testBundle) {
		sc := scope("old")
		fp := fingerprint("body")
		token := b.mustAcquire(t, claimReq(sc, fp, b.t0))
		require.NoError(t, b.store.Complete(b.ctx, sc, token, b.t0, sampleResponse()))

		expiry := b.t0.Add(Window)
		_, err := b.store.Get(b.ctx, sc, expiry.Add(-time.Millisecond))
		require.NoError(t, err, "a record is live until its ExpiresAt")
		_, err = b.store.Get(b.ctx, sc, expiry)
		require.ErrorIs(t, err, server.ErrRecordNotFound, "a record whose ExpiresAt is not after now is absent")

		// A different request may use the key once it expired.
		req := claimReq(sc, fingerprint("new body"), expiry)
		res := b.claim(t, req)
		require.True(t, res.Acquired)
		require.False(t, res.TakenOver)
		require.Equal(t, token+1, res.Token)

		rec, err := b.store.Get(b.ctx, sc, expiry)
		require.NoError(t, err)
		require.Equal(t, server.StateInProgress, rec.State)
		require.Equal(t, req.Fingerprint, rec.Fingerprint)
		require.Nil(t, rec.Response)
		require.True(t, expiry.Equal(rec.CreatedAt), "CreatedAt of the new record: got %v want %v", rec.CreatedAt, expiry)
		require.True(t, req.ExpiresAt.Equal(rec.ExpiresAt))
	}},
	{"Complete_AfterExpiry", func(t *testing.T, b *testBundle) {
		sc := scope("slow")
		token := b.mustAcquire(t, claimReq(sc, fingerprint("body"), b.t0))
		err := b.store.Complete(b.ctx, sc, token, b.t0.Add(Window), sampleResponse())
		require.ErrorIs(t, err, server.ErrLeaseLost)
	}},
	{"Claim_LapsedLeaseTakeover", func(t *testing.T, b *testBundle) {
		sc := scope("crashed")
		fp := fingerprint("body")
		token := b.mustAcquire(t, claimReq(sc, fp, b.t0))
		lapsed := b.t0.Add(Lease)

		// Another request never takes over.
		res := b.claim(t, claimReq(sc, fingerprint("other body"), lapsed))
		require.False(t, res.Acquired)
		require.Equal(t, server.StateInProgress, res.Existing.State)
		require.Equal(t, fp, res.Existing.Fingerprint)
		require.Equal(t, token, res.Existing.Token)

		// The same request does, with the next token.
		res = b.claim(t, claimReq(sc, fp, lapsed))
		require.True(t, res.Acquired)
		require.True(t, res.TakenOver)
		require.Equal(t, token+1, res.Token)

		rec, err := b.store.Get(b.ctx, sc, lapsed)
		require.NoError(t, err)
		require.Equal(t, token+1, rec.Token)
		require.True(t, lapsed.Add(Lease).Equal(rec.LockedUntil))
	}},
	{"OldToken_LeaseLost", func(t *testing.T, b *testBundle) {
		sc := scope("fenced")
		fp := fingerprint("body")
		old := b.mustAcquire(t, claimReq(sc, fp, b.t0))
		lapsed := b.t0.Add(Lease)
		current := b.claim(t, claimReq(sc, fp, lapsed))
		require.True(t, current.TakenOver)

		require.ErrorIs(t, b.store.ExtendLease(b.ctx, sc, old, lapsed, time.Hour), server.ErrLeaseLost)
		require.ErrorIs(t, b.store.Complete(b.ctx, sc, old, lapsed, sampleResponse()), server.ErrLeaseLost)
		require.ErrorIs(t, b.store.Release(b.ctx, sc, old), server.ErrLeaseLost)

		// The current holder is unaffected.
		rec, err := b.store.Get(b.ctx, sc, lapsed)
		require.NoError(t, err)
		require.Equal(t, server.StateInProgress, rec.State)
		require.Equal(t, current.Token, rec.Token)
		require.NoError(t, b.store.Complete(b.ctx, sc, current.Token, lapsed, sampleResponse()))
		// A completed record refuses every token.
		require.ErrorIs(t, b.store.Complete(b.ctx, sc, current.Token, lapsed, sampleResponse()), server.ErrLeaseLost)
		require.ErrorIs(t, b.store.ExtendLease(b.ctx, sc, current.Token, lapsed, time.Hour), server.ErrLeaseLost)
		require.ErrorIs(t, b.store.Release(b.ctx, sc, current.Token), server.ErrLeaseLost)
		rec, err = b.store.Get(b.ctx, sc, lapsed)
		require.NoError(t, err)
		requireSameResponse(t, sampleResponse(), rec.Response)
	}},
	{"Unknown_LeaseLost", func(t *testing.T, b *testBundle) {
		sc := scope("unknown")
		require.ErrorIs(t, b.store.Complete(b.ctx, sc, 1, b.t0, sampleResponse()), server.ErrLeaseLost)
		require.ErrorIs(t, b.store.Release(b.ctx, sc, 1), server.ErrLeaseLost)
		require.ErrorIs(t, b.store.ExtendLease(b.ctx, sc, 1, b.t0, Lease), server.ErrLeaseLost)
	}},
	{"ExtendLease", func(t *testing.T, b *testBundle) {
		sc := scope("long")
		fp := fingerprint("body")
		token := b.mustAcquire(t, claimReq(sc, fp, b.t0))
		extended := b.t0.Add(3 * Lease)
		require.NoError(t, b.store.ExtendLease(b.ctx, sc, token, b.t0, 3*Lease))

		rec, err := b.store.Get(b.ctx, sc, b.t0)
		require.NoError(t, err)
		require.True(t, extended.Equal(rec.LockedUntil), "LockedUntil: got %v want %v", rec.LockedUntil, extended)
		// The old lease end no longer allows a takeover.
		res := b.claim(t, claimReq(sc, fp, b.t0.Add(Lease)))
		require.False(t, res.Acquired)
		require.Equal(t, token, res.Existing.Token)
		// The new one does.
		res = b.claim(t, claimReq(sc, fp, extended))
		require.True(t, res.Acquired)
		require.True(t, res.TakenOver)
	}},
	{"Release_FreesKey", func(t *testing.T, b *testBundle) {
		sc := scope("failed")
		fp := fingerprint("body")
		token := b.mustAcquire(t, claimReq(sc, fp, b.t0))
		require.NoError(t, b.store.Release(b.ctx, sc, token))
		_, err := b.store.Get(b.ctx, sc, b.t0)
		require.ErrorIs(t, err, server.ErrRecordNotFound)
		res := b.claim(t, claimReq(sc, fp, b.t0.Add(time.Second)))
		require.True(t, res.Acquired)
		require.False(t, res.TakenOver)
	}},
	{"Scope_TenantIsolation", func(t *testing.T, b *testBundle) {
		a := server.Scope{Principal: "tenant-a", Endpoint: "POST /payments", Key: "retry-1"}
		c := server.Scope{Principal: "tenant-b", Endpoint: "POST /payments", Key: "retry-1"}
		tokenA := b.mustAcquire(t, claimReq(a, fingerprint("a"), b.t0))
		require.NoError(t, b.store.Complete(b.ctx, a, tokenA, b.t0, sampleResponse()))

		// B's request is a different request, and a first attempt.
		res := b.claim(t, claimReq(c, fingerprint("b"), b.t0))
		require.True(t, res.Acquired, "tenant B must not see tenant A's record")
		require.Equal(t, int64(1), res.Token)
		rec, err := b.store.Get(b.ctx, c, b.t0)
		require.NoError(t, err)
		require.Equal(t, server.StateInProgress, rec.State)
		require.Equal(t, fingerprint("b"), rec.Fingerprint)
		require.Nil(t, rec.Response)
		// A's token does not reach B's record.
		require.NoError(t, b.store.Release(b.ctx, c, res.Token))
		rec, err = b.store.Get(b.ctx, a, b.t0)
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State)
	}},
	{"Scope_Endpoint", func(t *testing.T, b *testBundle) {
		pay := server.Scope{Principal: "tenant-a", Endpoint: "POST /payments", Key: "k"}
		refund := server.Scope{Principal: "tenant-a", Endpoint: "POST /refunds", Key: "k"}
		wide := server.Scope{Principal: "tenant-a", Endpoint: "*", Key: "k"}
		for _, sc := range []server.Scope{pay, refund, wide} {
			res := b.claim(t, claimReq(sc, fingerprint(sc.Endpoint), b.t0))
			require.True(t, res.Acquired, "endpoint %q", sc.Endpoint)
		}
		// A duplicate still hits its own endpoint's record.
		res := b.claim(t, claimReq(refund, fingerprint(refund.Endpoint), b.t0))
		require.False(t, res.Acquired)
		require.Equal(t, refund, res.Existing.Scope)
	}},
	{"Tx_CommitMakesVisible", func(t *testing.T, b *testBundle) {
		sc := scope("tx-commit")
		fp := fingerprint("body")
		tx, err := b.store.BeginTx(b.ctx, LockTimeout)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		require.NotNil(t, tx.Handle())

		res, err := tx.Claim(b.ctx, claimReq(sc, fp, b.t0))
		require.NoError(t, err)
		require.True(t, res.Acquired)
		require.Equal(t, int64(1), res.Token)
		want := sampleResponse()
		require.NoError(t, tx.Complete(b.ctx, sc, res.Token, b.t0, want))
		require.NoError(t, tx.Commit(b.ctx))
		require.NoError(t, tx.Rollback(b.ctx), "Rollback after Commit is a no-op")

		rec, err := b.store.Get(b.ctx, sc, b.t0)
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State)
		requireSameResponse(t, want, rec.Response)
		dup := b.claim(t, claimReq(sc, fp, b.t0.Add(time.Second)))
		require.False(t, dup.Acquired)
		requireSameResponse(t, want, dup.Existing.Response)
	}},
	{"Tx_RollbackFreesKey", func(t *testing.T, b *testBundle) {
		sc := scope("tx-rollback")
		fp := fingerprint("body")
		tx, err := b.store.BeginTx(b.ctx, LockTimeout)
		require.NoError(t, err)
		res, err := tx.Claim(b.ctx, claimReq(sc, fp, b.t0))
		require.NoError(t, err)
		require.True(t, res.Acquired)
		require.NoError(t, tx.Rollback(b.ctx))
		require.NoError(t, tx.Rollback(b.ctx), "a second Rollback is a no-op")

		_, err = b.store.Get(b.ctx, sc, b.t0)
		require.ErrorIs(t, err, server.ErrRecordNotFound)
		again := b.claim(t, claimReq(sc, fp, b.t0))
		require.True(t, again.Acquired)
		require.Equal(t, int64(1), again.Token)
	}},
	{"Tx_ConcurrentClaimInFlight", func(t *testing.T, b *testBundle) {
		sc := scope("tx-race")
		fp := fingerprint("body")
		first, err := b.store.BeginTx(b.ctx, LockTimeout)
		require.NoError(t, err)
		t.Cleanup(func() { _ = first.Rollback(context.Background()) })
		res, err := first.Claim(b.ctx, claimReq(sc, fp, b.t0))
		require.NoError(t, err)
		require.True(t, res.Acquired)

		// The second claim must give up after about the lock timeout; the
		// context only keeps a broken store from hanging the test.
		second, err := b.store.BeginTx(b.ctx, LockTimeout)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(b.ctx, 20*LockTimeout+5*time.Second)
		defer cancel()
		_, err = second.Claim(ctx, claimReq(sc, fp, b.t0))
		require.ErrorIs(t, err, server.ErrInFlight)
		require.NoError(t, ctx.Err(), "the claim must fail by the lock timeout, not the context")
		require.NoError(t, second.Rollback(b.ctx))

		require.NoError(t, first.Complete(b.ctx, sc, res.Token, b.t0, sampleResponse()))
		require.NoError(t, first.Commit(b.ctx))

		third, err := b.store.BeginTx(b.ctx, LockTimeout)
		require.NoError(t, err)
		t.Cleanup(func() { _ = third.Rollback(context.Background()) })
		dup, err := third.Claim(b.ctx, claimReq(sc, fp, b.t0.Add(time.Second)))
		require.NoError(t, err)
		require.False(t, dup.Acquired)
		require.Equal(t, server.StateCompleted, dup.Existing.State)
		requireSameResponse(t, sampleResponse(), dup.Existing.Response)
		require.NoError(t, third.Commit(b.ctx))
	}},
	{"Sweep_DeletesOnlyExpired", func(t *testing.T, b *testBundle) {
		fp := fingerprint("body")
		short := func(sc server.Scope, now time.Time) server.ClaimRequest {
			req := claimReq(sc, fp, now)
			req.ExpiresAt = now.Add(time.Minute)
			return req
		}
		for i := range SweepRows {
			sc := scope(fmt.Sprintf("expired-%d", i))
			token := b.mustAcquire(t, short(sc, b.t0.Add(time.Duration(i)*time.Millisecond)))
			if i%2 == 0 {
				require.NoError(t, b.store.Complete(b.ctx, sc, token, b.t0, sampleResponse()))
			}
		}
		live := []server.Scope{scope("live-1"), scope("live-2")}
		for _, sc := range live {
			b.mustAcquire(t, claimReq(sc, fp, b.t0))
		}
		sweepAt := b.t0.Add(time.Minute + SweepRows*time.Millisecond + server.SweepGrace)

		n, err := b.store.Sweep(b.ctx, b.t0)
		require.NoError(t, err)
		require.Equal(t, 0, n, "nothing has expired at t0")
		n, err = b.store.Sweep(b.ctx, sweepAt)
		require.NoError(t, err)
		require.Equal(t, SweepRows, n)
		n, err = b.store.Sweep(b.ctx, sweepAt)
		require.NoError(t, err)
		require.Equal(t, 0, n)
		for _, sc := range live {
			_, err := b.store.Get(b.ctx, sc, sweepAt)
			require.NoError(t, err, "live record %v was swept", sc)
		}
		// A swept key is claimed anew.
		res := b.claim(t, claimReq(scope("expired-0"), fp, sweepAt))
		require.True(t, res.Acquired)
		require.Equal(t, int64(1), res.Token)
	}},
	{"Sweep_KeepsGrace", func(t *testing.T, b *testBundle) {
		// Sweep called directly, with the time the caller reads, keeps a
		// record for server.SweepGrace after it expired: a request that
		// read the clock just before then may still be on its way to
		// claim it, and must replay rather than run again.
		sc := scope("just-expired")
		req := claimReq(sc, fingerprint("body"), b.t0)
		req.ExpiresAt = b.t0.Add(time.Minute)
		token := b.mustAcquire(t, req)
		require.NoError(t, b.store.Complete(b.ctx, sc, token, b.t0, sampleResponse()))

		n, err := b.store.Sweep(b.ctx, req.ExpiresAt.Add(server.SweepGrace/2))
		require.NoError(t, err)
		require.Zero(t, n, "a record expired less than SweepGrace ago was swept")
		rec, err := b.store.Get(b.ctx, sc, req.ExpiresAt.Add(-time.Millisecond))
		require.NoError(t, err, "a request stamped before the expiry still finds its record")
		require.Equal(t, server.StateCompleted, rec.State)

		n, err = b.store.Sweep(b.ctx, req.ExpiresAt.Add(server.SweepGrace))
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}},
	{"Sweep_CanceledContext", func(t *testing.T, b *testBundle) {
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		_, err := b.store.Sweep(ctx, b.t0)
		require.ErrorIs(t, err, context.Canceled)
	}},
	{"Claim_ConcurrentSameScope", func(t *testing.T, b *testBundle) {
		sc := scope("stampede")
		fp := fingerprint("body")
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			results  = make([]server.ClaimResult, Concurrency)
			errs     = make([]error, Concurrency)
			acquired int
		)
		for i := range Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = b.store.Claim(b.ctx, claimReq(sc, fp, b.t0))
			}()
		}
		close(start)
		wg.Wait()
		var winner int64
		for i := range Concurrency {
			require.NoError(t, errs[i], "claim %d", i)
			if results[i].Acquired {
				acquired++
				winner = results[i].Token
				continue
			}
			require.NotNil(t, results[i].Existing)
			require.Equal(t, server.StateInProgress, results[i].Existing.State)
		}
		require.Equal(t, 1, acquired, "exactly one of %d concurrent claims must acquire", Concurrency)
		require.Equal(t, int64(1), winner)
	}},
	{"Tx_ConcurrentSameScope", func(t *testing.T, b *testBundle) {
		sc := scope("tx-stampede")
		fp := fingerprint("body")
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results = make([]server.ClaimResult, Concurrency)
			errs    = make([]error, Concurrency)
		)
		for i := range Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				tx, err := b.store.BeginTx(b.ctx, LockTimeout)
				if err != nil {
					errs[i] = err
					return
				}
				defer func() { _ = tx.Rollback(context.Background()) }()
				res, err := tx.Claim(b.ctx, claimReq(sc, fp, b.t0))
				results[i], errs[i] = res, err
				if err == nil && res.Acquired {
					if errs[i] = tx.Complete(b.ctx, sc, res.Token, b.t0, sampleResponse()); errs[i] == nil {
						errs[i] = tx.Commit(b.ctx)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		acquired := 0
		for i := range Concurrency {
			switch {
			case errors.Is(errs[i], server.ErrInFlight), errors.Is(errs[i], server.ErrStoreBusy):
				// Waited out the lock timeout, or SQLite's single writer.
			case errs[i] != nil:
				t.Fatalf("claim %d: unexpected error %v", i, errs[i])
			case results[i].Acquired:
				acquired++
			default:
				require.Equal(t, server.StateCompleted, results[i].Existing.State, "claim %d", i)
				requireSameResponse(t, sampleResponse(), results[i].Existing.Response)
			}
		}
		require.Equal(t, 1, acquired, "exactly one of %d concurrent transactional claims must acquire", Concurrency)
		rec, err := b.store.Get(b.ctx, sc, b.t0)
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State)
	}},
}

// StatsStore is a store that reports its size, as the SQL stores do.
type StatsStore interface {
	server.Store
	Stats(ctx context.Context, now time.Time) (server.StoreStats, error)
}

// RunStats checks the Stats of a fresh, migrated store: an empty store is
// all zeros; then expired, live in-progress and completed rows are counted
// and the oldest live record is found.
func RunStats(t *testing.T, ctx context.Context, store StatsStore) {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	st, err := store.Stats(ctx, t0)
	require.NoError(t, err)
	st.StoreHealth = server.StoreHealth{} // sizes: an empty table has pages
	require.Equal(t, server.StoreStats{}, st)

	claim := func(key string, now time.Time, window time.Duration) int64 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
			ExpiresAt: now.Add(window), LockedUntil: now.Add(time.Second),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Token
	}
	claim("expired", t0, time.Minute)
	claim("oldest-live", t0.Add(time.Second), time.Hour)
	token := claim("completed", t0.Add(2*time.Second), time.Hour)
	require.NoError(t, store.Complete(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: "completed"}, token, t0.Add(2*time.Second),
		&server.StoredResponse{Status: 200}))
	claim("in-progress", t0.Add(3*time.Second), time.Hour)

	st, err = store.Stats(ctx, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Rows)
	require.Equal(t, int64(1), st.Expired)
	require.Equal(t, int64(2), st.InProgress)
	require.True(t, t0.Add(time.Second).Equal(st.OldestCreatedAt), "OldestCreatedAt: got %v", st.OldestCreatedAt)
}

// RunHealth checks the server.StoreHealth part of the Stats of a fresh,
// migrated store: nothing stuck and no expiry on an empty store; then a
// lease that ran out is stuck (a live completed row and a live lease are
// not, nor is an expired in-progress row), the oldest expiry is that of the
// expired row, and the table and its indexes have a size.
func RunHealth(t *testing.T, ctx context.Context, store StatsStore) {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	st, err := store.Stats(ctx, t0)
	require.NoError(t, err)
	require.Zero(t, st.Stuck)
	require.True(t, st.OldestExpiresAt.IsZero(), "OldestExpiresAt of an empty store: got %v", st.OldestExpiresAt)

	claim := func(key string, now time.Time, window, lease time.Duration) int64 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
			ExpiresAt: now.Add(window), LockedUntil: now.Add(lease),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Token
	}
	claim("expired-in-progress", t0, time.Minute, time.Second)
	claim("stuck", t0, time.Hour, time.Second)
	claim("leased", t0, time.Hour, time.Hour)
	token := claim("completed", t0, time.Hour, time.Second)
	require.NoError(t, store.Complete(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: "completed"}, token, t0,
		&server.StoredResponse{Status: 200, Body: []byte("ok")}))

	st, err = store.Stats(ctx, t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Stuck, "only the live in-progress row whose lease ended is stuck")
	require.True(t, t0.Add(time.Minute).Equal(st.OldestExpiresAt), "OldestExpiresAt: got %v want %v", st.OldestExpiresAt, t0.Add(time.Minute))
	require.Positive(t, st.TableBytes)
	require.Positive(t, st.IndexBytes)
}

// InFlightStore is a store that lists its in-progress claims, as the SQL
// stores do.
type InFlightStore interface {
	server.Store
	InFlight(ctx context.Context, now time.Time, olderThan time.Duration, limit int) ([]server.Record, error)
}

// RunInFlight checks InFlight on a fresh, migrated store: it lists live
// in-progress records created at least olderThan ago, oldest first, up to
// limit, with their token and lease; never completed or expired ones; and
// a listed record's scope, fingerprint and version take it over.
func RunInFlight(t *testing.T, ctx context.Context, store InFlightStore) {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	claim := func(key string, now time.Time, window time.Duration) int64 {
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "p", Endpoint: "e", Key: key},
			Fingerprint: []byte{7}, FingerprintVersion: 1, Now: now,
			ExpiresAt: now.Add(window), LockedUntil: now.Add(time.Second),
		})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Token
	}
	claim("old", t0, time.Hour)
	claim("new", t0.Add(50*time.Second), time.Hour)
	claim("expired", t0, time.Minute)
	tok := claim("done", t0, time.Hour)
	require.NoError(t, store.Complete(ctx, server.Scope{Principal: "p", Endpoint: "e", Key: "done"}, tok, t0, &server.StoredResponse{Status: 200}))

	now := t0.Add(2 * time.Minute)
	keys := func(olderThan time.Duration, limit int) []string {
		recs, err := store.InFlight(ctx, now, olderThan, limit)
		require.NoError(t, err)
		var out []string
		for _, r := range recs {
			require.Equal(t, server.StateInProgress, r.State)
			out = append(out, r.Key)
		}
		return out
	}
	require.Equal(t, []string{"old", "new"}, keys(0, 100))
	require.Equal(t, []string{"old"}, keys(90*time.Second, 100))
	require.Equal(t, []string{"old"}, keys(0, 1))
	recs, err := store.InFlight(ctx, now, 90*time.Second, 10)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, server.Scope{Principal: "p", Endpoint: "e", Key: "old"}, r.Scope)
	require.Equal(t, int64(1), r.Token)
	require.Equal(t, []byte{7}, r.Fingerprint)
	require.True(t, t0.Equal(r.CreatedAt), "CreatedAt: got %v", r.CreatedAt)
	require.True(t, t0.Add(time.Second).Equal(r.LockedUntil), "LockedUntil: got %v", r.LockedUntil)
	require.True(t, t0.Add(time.Hour).Equal(r.ExpiresAt), "ExpiresAt: got %v", r.ExpiresAt)

	// A listed record carries what a takeover needs (package
	// server/recoverer relies on it): a claim with its scope, fingerprint
	// and version, past its lease, takes it over with the next token.
	res, err := store.Claim(ctx, server.ClaimRequest{
		Scope: r.Scope, Fingerprint: r.Fingerprint, FingerprintVersion: r.FingerprintVersion,
		Now: now, ExpiresAt: r.ExpiresAt, LockedUntil: now.Add(time.Minute),
	})
	require.NoError(t, err)
	require.True(t, res.Acquired, "a lapsed listed claim is taken over")
	require.True(t, res.TakenOver)
	require.Equal(t, r.Token+1, res.Token)
}

// Migrator is a store that applies its own schema.
type Migrator interface {
	Migrate(ctx context.Context) error
}

// RunMigrations checks that Migrate is idempotent and safe when processes
// run it at once: migrated, a migrated store, migrates again; then n stores
// that open returns on one fresh database, each on a pool of its own as
// separate processes would, migrate concurrently. open returns a store and
// a function that closes its pool. recorded reads the count of rows and the
// highest version in that database's versions table: each of the want
// migrations must be recorded once.
func RunMigrations(t *testing.T, ctx context.Context, migrated Migrator, n int,
	open func(ctx context.Context) (Migrator, func(), error), recorded func(ctx context.Context) (count, version int, err error), want int) {
	t.Helper()
	require.NoError(t, migrated.Migrate(ctx), "second Migrate")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			store, closeFunc, err := open(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer closeFunc()
			errs[i] = store.Migrate(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "Migrate %d", i)
	}
	count, version, err := recorded(ctx)
	require.NoError(t, err)
	require.Equal(t, want, count, "each migration is recorded once")
	require.Equal(t, want, version)
}

// BenchFingerprint is the fingerprint of the claims of ClaimFunc.
var BenchFingerprint = func() []byte { h := sha256.Sum256([]byte(`{"amount":4000}`)); return h[:] }()

// BenchClaims runs claim with a fresh key per call, serially and in
// parallel, reporting allocations.
func BenchClaims(b *testing.B, claim func(ctx context.Context, key string) error) {
	ctx := context.Background()
	var n atomic.Int64
	b.Run("Serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := claim(ctx, "k-"+strconv.FormatInt(n.Add(1), 10)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := claim(ctx, "k-"+strconv.FormatInt(n.Add(1), 10)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// ClaimFunc returns a claim of key on store for BenchClaims; a claim that
// does not acquire fails.
func ClaimFunc(store server.Store) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		now := time.Now()
		res, err := store.Claim(ctx, server.ClaimRequest{
			Scope:       server.Scope{Principal: "bench", Endpoint: "POST /payments", Key: key},
			Fingerprint: BenchFingerprint, FingerprintVersion: 1,
			Now: now, ExpiresAt: now.Add(24 * time.Hour), LockedUntil: now.Add(30 * time.Second),
		})
		if err == nil && !res.Acquired {
			return errors.New("claim of a fresh key did not acquire")
		}
		return err
	}
}

// BenchClaimsAgainstBaseline runs BenchClaims on a fresh store ("Store")
// and, on another, on the plain INSERT of the same columns into an
// equivalent table that newInsert prepares ("RawInsert"): what a claim
// costs over the cheapest possible write.
func BenchClaimsAgainstBaseline(b *testing.B, newStore func(b *testing.B) server.Store, newInsert func(b *testing.B) func(ctx context.Context, key string) error) {
	b.Run("Store", func(b *testing.B) { BenchClaims(b, ClaimFunc(newStore(b))) })
	b.Run("RawInsert", func(b *testing.B) { BenchClaims(b, newInsert(b)) })
}

// Context returns a context that ends with t, or after a minute.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// RunTxEffectRollsBack checks transactional mode's promise on store: a
// claim and an effect written on the transaction's Handle roll back
// together. effect writes one effect row on the handle; checkNoEffect
// requires, outside the transaction, that no effect row exists.
func RunTxEffectRollsBack(t *testing.T, ctx context.Context, store server.Store, effect func(ctx context.Context, handle any) error, checkNoEffect func(t *testing.T)) {
	t.Helper()
	tx, err := store.BeginTx(ctx, LockTimeout)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	now := time.Now()
	sc := server.Scope{Principal: "p", Endpoint: "POST /payments", Key: "k"}
	req := server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1, Now: now,
		ExpiresAt: now.Add(time.Hour), LockedUntil: now.Add(time.Second)}
	res, err := tx.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.NoError(t, effect(ctx, tx.Handle()))
	require.NoError(t, tx.Rollback(ctx))

	_, err = store.Get(ctx, sc, now)
	require.ErrorIs(t, err, server.ErrRecordNotFound)
	checkNoEffect(t)
}
