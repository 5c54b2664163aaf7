package sealstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/server"
)

// Store is a server.Store that seals the responses it passes to an inner
// store and opens those it reads back (see the package doc). Every other
// part of a record, and every decision (claims, tokens, expiry), is the
// inner store's.
type Store struct {
	inner  server.Store
	cfg    *Config
	sealer sealer
	failed atomic.Int64
}

var (
	_ server.Store   = (*Store)(nil)
	_ server.StoreTx = (*storeTx)(nil)
)

// New returns a Store that seals responses into inner with the keys of
// cfg. cfg is required: it holds the keys.
func New(inner server.Store, cfg *Config) (*Store, error) {
	if inner == nil {
		return nil, errors.New("idemkit/server/sealstore: New: inner store is nil")
	}
	if cfg == nil {
		return nil, errors.New("idemkit/server/sealstore: invalid config: Config is nil; Keys is required")
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Store{inner: inner, cfg: c, sealer: newSealer(c.Keys, c.Current)}, nil
}

// Unwrap returns the inner store.
func (s *Store) Unwrap() server.Store { return s.inner }

// Undecryptable returns how many stored responses this Store could not
// open since New.
func (s *Store) Undecryptable() int64 { return s.failed.Load() }

// stored returns the scope the inner store keeps for sc: sc with the
// stored key (see StoredKey).
func (s *Store) stored(sc server.Scope) (server.Scope, error) {
	if !s.cfg.HashKeys {
		return sc, nil
	}
	// The hash of an empty part would be a valid key: refuse what the
	// inner store would have refused.
	switch {
	case sc.Principal == "":
		return sc, errors.New("idemkit/server: Scope.Principal is empty")
	case sc.Endpoint == "":
		return sc, errors.New("idemkit/server: Scope.Endpoint is empty")
	case sc.Key == "":
		return sc, errors.New("idemkit/server: Scope.Key is empty")
	}
	sc.Key = s.StoredKey(sc)
	return sc, nil
}

// seal returns the stored form of resp for sc: redacted, then sealed.
func (s *Store) seal(sc server.Scope, resp *server.StoredResponse) (*server.StoredResponse, error) {
	if resp == nil {
		return nil, errors.New("idemkit/server: StoredResponse is nil")
	}
	if s.cfg.RedactFunc != nil {
		c := *resp
		c.Header = resp.Header.Clone()
		if resp.Body != nil {
			c.Body = append([]byte{}, resp.Body...)
		}
		s.cfg.RedactFunc(sc, &c)
		resp = &c
	}
	return s.sealer.seal(sc, resp)
}

// open returns rec, read from the inner store for sc, as the caller must
// see it: with the caller's key and its response opened. A response that
// does not open is an *OpenError, logged and counted.
func (s *Store) open(ctx context.Context, op string, sc server.Scope, rec *server.Record) (*server.Record, error) {
	if rec == nil {
		return nil, nil
	}
	rec.Scope = sc
	if rec.Response == nil {
		return rec, nil
	}
	var (
		resp *server.StoredResponse
		id   string
		err  error
	)
	switch rec.Response.Header.Get(markerHeader) {
	case markerV1:
		resp, id, err = s.sealer.open(sc, rec.Response)
	case "":
		if s.cfg.AcceptPlaintext {
			return rec, nil
		}
		err = errNotSealed
	default:
		err = fmt.Errorf("%w: unknown marker %q", errFormat, rec.Response.Header.Get(markerHeader))
	}
	if err != nil {
		oe := &OpenError{Scope: sc, KeyID: id, Err: err}
		s.failed.Add(1)
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemkit: stored response cannot be opened; not replayed",
			slog.String("op", op), slog.String("principal", sc.Principal), slog.String("endpoint", sc.Endpoint),
			slog.String("key_id", id), slog.Any("error", err))
		if s.cfg.OnErrorFunc != nil {
			s.cfg.OnErrorFunc(ctx, oe)
		}
		return nil, oe
	}
	rec.Response = resp
	return rec, nil
}

// claim runs a claim of req on claimFunc (the store's or a transaction's)
// and opens the record it returns.
func (s *Store) claim(ctx context.Context, req server.ClaimRequest, claimFunc func(context.Context, server.ClaimRequest) (server.ClaimResult, error)) (server.ClaimResult, error) {
	sc := req.Scope
	var err error
	if req.Scope, err = s.stored(sc); err != nil {
		return server.ClaimResult{}, err
	}
	res, err := claimFunc(ctx, req)
	if err != nil || res.Existing == nil {
		return res, err
	}
	if res.Existing, err = s.open(ctx, "claim", sc, res.Existing); err != nil {
		return server.ClaimResult{}, err
	}
	return res, nil
}

// Claim implements server.Store.Claim. The record that prevented the claim
// carries the caller's key and its response opened; a response that does
// not open fails the claim with an *OpenError.
func (s *Store) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	return s.claim(ctx, req, s.inner.Claim)
}

// Complete implements server.Store.Complete: resp is redacted
// (Config.RedactFunc), sealed with the current key and stored.
func (s *Store) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	inner, err := s.stored(sc)
	if err != nil {
		return err
	}
	sealed, err := s.seal(sc, resp)
	if err != nil {
		return err
	}
	return s.inner.Complete(ctx, inner, token, now, sealed)
}

// Release implements server.Store.Release.
func (s *Store) Release(ctx context.Context, sc server.Scope, token int64) error {
	inner, err := s.stored(sc)
	if err != nil {
		return err
	}
	return s.inner.Release(ctx, inner, token)
}

// ExtendLease implements server.Store.ExtendLease.
func (s *Store) ExtendLease(ctx context.Context, sc server.Scope, token int64, now time.Time, lease time.Duration) error {
	inner, err := s.stored(sc)
	if err != nil {
		return err
	}
	return s.inner.ExtendLease(ctx, inner, token, now, lease)
}

// Get implements server.Store.Get. A response that does not open is an
// *OpenError.
func (s *Store) Get(ctx context.Context, sc server.Scope, now time.Time) (*server.Record, error) {
	inner, err := s.stored(sc)
	if err != nil {
		return nil, err
	}
	rec, err := s.inner.Get(ctx, inner, now)
	if err != nil {
		return nil, err
	}
	return s.open(ctx, "get", sc, rec)
}

// Sweep implements server.Store.Sweep: the inner store's.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	return s.inner.Sweep(ctx, now)
}

// BeginTx implements server.Store.BeginTx. The transaction's Claim and
// Complete seal and open as the Store's do; its Handle is the inner
// transaction's, so pgstore.Tx and sqlitestore.Tx find the driver
// transaction as without sealing.
func (s *Store) BeginTx(ctx context.Context, lockTimeout time.Duration) (server.StoreTx, error) {
	tx, err := s.inner.BeginTx(ctx, lockTimeout)
	if err != nil {
		return nil, err
	}
	return &storeTx{s: s, tx: tx}, nil
}

// TxClaimAnswersReplays reports what the inner store does: whether its
// transactional claim answers a completed record itself (pgstore.Store's
// does), so that the middleware skips its own read.
func (s *Store) TxClaimAnswersReplays() bool {
	rf, ok := s.inner.(interface{ TxClaimAnswersReplays() bool })
	return ok && rf.TxClaimAnswersReplays()
}

// PrincipalUsage returns the inner store's usage of principal, for the
// per-principal quotas (server.Config.MaxKeysPerPrincipal). Stored bytes
// count the sealed responses, a few dozen bytes more than the plaintext
// each. It fails with errors.ErrUnsupported if the inner store reports no
// usage.
func (s *Store) PrincipalUsage(ctx context.Context, principal string, now time.Time) (server.PrincipalUsage, error) {
	u, ok := s.inner.(interface {
		PrincipalUsage(ctx context.Context, principal string, now time.Time) (server.PrincipalUsage, error)
	})
	if !ok {
		return server.PrincipalUsage{}, fmt.Errorf("idemkit/server/sealstore: PrincipalUsage: %T: %w", s.inner, errors.ErrUnsupported)
	}
	return u.PrincipalUsage(ctx, principal, now)
}

// Stats returns the inner store's Stats. It fails with
// errors.ErrUnsupported if the inner store has none.
func (s *Store) Stats(ctx context.Context, now time.Time) (server.StoreStats, error) {
	st, ok := s.inner.(interface {
		Stats(ctx context.Context, now time.Time) (server.StoreStats, error)
	})
	if !ok {
		return server.StoreStats{}, fmt.Errorf("idemkit/server/sealstore: Stats: %T: %w", s.inner, errors.ErrUnsupported)
	}
	return st.Stats(ctx, now)
}

// storeTx is the server.StoreTx of Store.
type storeTx struct {
	s  *Store
	tx server.StoreTx
}

// Claim implements server.StoreTx.Claim, as Store.Claim does.
func (t *storeTx) Claim(ctx context.Context, req server.ClaimRequest) (server.ClaimResult, error) {
	return t.s.claim(ctx, req, t.tx.Claim)
}

// Complete implements server.StoreTx.Complete, as Store.Complete does.
func (t *storeTx) Complete(ctx context.Context, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	inner, err := t.s.stored(sc)
	if err != nil {
		return err
	}
	sealed, err := t.s.seal(sc, resp)
	if err != nil {
		return err
	}
	return t.tx.Complete(ctx, inner, token, now, sealed)
}

// Commit implements server.StoreTx.Commit.
func (t *storeTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

// Rollback implements server.StoreTx.Rollback.
func (t *storeTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// Handle implements server.StoreTx.Handle: the inner transaction's handle.
func (t *storeTx) Handle() any { return t.tx.Handle() }
