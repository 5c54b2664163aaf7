package recoverer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/server"
)

// Lister is a store that lists its in-flight claims, oldest first:
// pgstore.Store, sqlitestore.Store and mysqlstore.Store.
type Lister interface {
	InFlight(ctx context.Context, now time.Time, olderThan time.Duration, limit int) ([]server.Record, error)
}

// Claim is a lapsed lease-mode claim the recoverer took over and hands to
// the RecoverFunc.
type Claim struct {
	// Scope is the request's scope: principal, endpoint and key.
	Scope server.Scope
	// DownstreamKey is Scope.DownstreamKey(), the idempotency key the
	// handler forwarded downstream: ask the downstream by it.
	DownstreamKey string
	// Token is the recoverer's fencing token, now the current one;
	// PreviousToken is the dead holder's.
	Token, PreviousToken int64
	// CreatedAt is when the request first claimed the key.
	CreatedAt time.Time
	// Attempt is the number of times the recoverer has taken this claim
	// over, this one included.
	Attempt int
}

// RecoverFunc decides what became of a lapsed claim by asking the
// downstream it called with c.DownstreamKey. It returns the response the
// handler would have sent, to be stored and replayed (the status, the
// replayable headers, and the body byte for byte); or nil and no error
// when the effect was never made, to release the claim so that a retry
// runs the handler; or an error when the outcome is still unknown, to
// leave the claim for a later pass. ctx ends 5% before Config.Lease and
// when the Recoverer is closed.
type RecoverFunc func(ctx context.Context, c Claim) (*server.StoredResponse, error)

// leaseMarginDivisor is the part of its lease the recoverer gives up to
// clock rate and scheduling, as the middleware does: the RecoverFunc's
// context ends Lease/20 before the lease.
const leaseMarginDivisor = 20

// maxTracked bounds the attempts the recoverer remembers; past it the
// counts start afresh.
const maxTracked = 10_000

// Recoverer finds lease-mode claims whose holder died and hands them to a
// RecoverFunc, once at once and then every Config.Interval, until Close.
type Recoverer struct {
	store       server.Store
	lister      Lister
	fn          RecoverFunc
	cfg         *Config
	timeNowFunc func() time.Time

	// attempts counts the takeovers of each claim (scope and creation
	// time); only the pass goroutine uses it, under passMu.
	passMu   sync.Mutex
	attempts map[attemptKey]int

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	stats     stats
}

type attemptKey struct {
	scope   server.Scope
	created int64
}

// New returns a Recoverer over store that runs no passes of its own: call
// Pass, or use Start. cfg may be nil. It returns ErrNoListing if neither
// store nor a store it wraps (an Unwrap() server.Store method, as
// sealstore.Store has) lists its in-flight claims, and ErrKeysHashed if a
// wrapper keeps hashed keys. The claims go through store itself, so that
// a wrapper seals the recovered response as it seals the middleware's.
func New(store server.Store, fn RecoverFunc, cfg *Config) (*Recoverer, error) {
	if store == nil {
		return nil, errors.New("idemkit/server/recoverer: the store is nil")
	}
	if fn == nil {
		return nil, errNilFunc
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lister, hashed := findLister(store)
	if hashed {
		return nil, ErrKeysHashed
	}
	if lister == nil {
		return nil, fmt.Errorf("%w: %T has no InFlight method", ErrNoListing, store)
	}
	return &Recoverer{
		store: store, lister: lister, fn: fn, cfg: cfg, timeNowFunc: time.Now,
		attempts: make(map[attemptKey]int),
		cancel:   func() {},
	}, nil
}

// Start is New, and starts a goroutine that runs a pass at once and then
// every cfg.Interval, until Close.
func Start(store server.Store, fn RecoverFunc, cfg *Config) (*Recoverer, error) {
	r, err := New(store, fn, cfg)
	if err != nil {
		return nil, err
	}
	r.start()
	return r, nil
}

func (r *Recoverer) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go r.run(ctx)
}

// findLister returns store, or the first store it wraps, that lists its
// in-flight claims; nil if none does. hashed reports whether a wrapper on
// the way keeps a hash of each key instead of the key (a StoredKey method
// that changes the key, as sealstore.Store's does with HashKeys).
func findLister(store server.Store) (l Lister, hashed bool) {
	probe := server.Scope{Principal: "p", Endpoint: "*", Key: "k"}
	for range 8 { // wrappers of wrappers, within reason
		if k, ok := store.(interface{ StoredKey(server.Scope) string }); ok && k.StoredKey(probe) != probe.Key {
			return nil, true
		}
		if l, ok := store.(Lister); ok {
			return l, false
		}
		u, ok := store.(interface{ Unwrap() server.Store })
		if !ok {
			return nil, false
		}
		store = u.Unwrap()
		if store == nil {
			return nil, false
		}
	}
	return nil, false
}

func (r *Recoverer) run(ctx context.Context) {
	defer close(r.done)
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		_ = r.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Close stops the recoverer, canceling a pass in progress (and the
// RecoverFunc's context), and waits for its goroutine to exit. A claim
// taken over and not yet finished is left, and its lease lapses. It is
// safe to call more than once, and on a Recoverer from New; it always
// returns nil.
func (r *Recoverer) Close() error {
	r.closeOnce.Do(r.cancel)
	if r.done != nil {
		<-r.done
	}
	return nil
}

// Pass runs one pass: it lists up to Config.Batch in-progress claims
// created at least Config.MinAge ago, oldest first (and as many more as
// it has given up on), and recovers, one at a time, those whose lease
// ended at least MinAge ago. It returns the listing's error (a failed
// claim is an Event, not an error). ctx cancels the pass and the
// RecoverFunc, never a takeover, completion or release halfway (those
// are bounded by Config.StoreTimeout). Passes do not overlap: a Pass
// called while another runs waits for it.
func (r *Recoverer) Pass(ctx context.Context) error {
	r.passMu.Lock()
	defer r.passMu.Unlock()
	start := r.timeNowFunc()
	// The claims given up on stay in flight until a retry or their expiry:
	// list that many more, so that they do not crowd the others out.
	limit := r.cfg.Batch
	for _, n := range r.attempts {
		if n >= r.cfg.MaxAttempts {
			limit++
		}
	}
	listCtx, cancel := context.WithTimeout(ctx, r.cfg.StoreTimeout)
	recs, err := r.lister.InFlight(listCtx, start, r.cfg.MinAge, limit)
	cancel()
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err // closed: not a failure
		}
		r.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemkit: recoverer could not list the in-flight claims", slog.Any("error", err))
		r.stats.pass(true, r.timeNowFunc(), 0)
		return err
	}
	seen := make(map[attemptKey]bool, len(recs))
	for i := range recs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		seen[keyOf(&recs[i])] = true
		t0 := time.Now()
		ev := r.recover(ctx, &recs[i])
		ev.Duration = time.Since(t0)
		r.stats.event(ev)
		if r.cfg.OnEventFunc != nil {
			r.cfg.OnEventFunc(ev)
		}
	}
	if len(recs) < limit {
		// The listing was complete: forget the claims no longer in flight.
		for k := range r.attempts {
			if !seen[k] {
				delete(r.attempts, k)
			}
		}
	}
	givenUp := 0
	for _, n := range r.attempts {
		if n >= r.cfg.MaxAttempts {
			givenUp++
		}
	}
	r.stats.pass(false, r.timeNowFunc(), givenUp)
	return nil
}

func keyOf(rec *server.Record) attemptKey {
	return attemptKey{scope: rec.Scope, created: rec.CreatedAt.UnixNano()}
}

// recover looks at one listed claim and acts on it if its lease lapsed.
func (r *Recoverer) recover(ctx context.Context, rec *server.Record) Event {
	ev := Event{Scope: rec.Scope}
	now := r.timeNowFunc()
	if rec.LockedUntil.Add(r.cfg.MinAge).After(now) {
		ev.Outcome, ev.Reason = OutcomeSkipped, ReasonLive
		return ev
	}
	if rec.ExpiresAt.Sub(now) < 2*r.cfg.Lease {
		ev.Outcome, ev.Reason = OutcomeSkipped, ReasonExpiring
		return ev
	}
	key := keyOf(rec)
	if r.attempts[key] >= r.cfg.MaxAttempts {
		ev.Outcome, ev.Reason = OutcomeSkipped, ReasonGaveUp
		return ev
	}

	// The takeover is the claim a retry would make: same scope, same
	// fingerprint; the store decides, by its clock, whether the lease
	// lapsed, and fences the dead holder out with a new token. The
	// record keeps its expiry.
	sent := time.Now()
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StoreTimeout)
	res, err := r.store.Claim(claimCtx, server.ClaimRequest{
		Scope:              rec.Scope,
		Fingerprint:        rec.Fingerprint,
		FingerprintVersion: rec.FingerprintVersion,
		Now:                now,
		ExpiresAt:          rec.ExpiresAt,
		LockedUntil:        now.Add(r.cfg.Lease),
	})
	cancel()
	switch {
	case err != nil:
		ev.Outcome, ev.Err = OutcomeFailed, fmt.Errorf("claim: %w", err)
		r.log(ctx, slog.LevelWarn, "idemkit: recoverer could not take the claim over", ev)
		return ev
	case !res.Acquired:
		ev.Outcome, ev.Reason = OutcomeSkipped, ReasonHeld
		return ev
	case !res.TakenOver:
		// The record went away between the listing and the claim, which
		// then claimed the key afresh: give it back at once.
		ev.Outcome, ev.Reason = OutcomeSkipped, ReasonGone
		if err := r.release(ctx, rec.Scope, res.Token); err != nil {
			ev.Outcome, ev.Reason, ev.Err = OutcomeFailed, "", fmt.Errorf("release a fresh claim: %w", err)
			r.log(ctx, slog.LevelWarn, "idemkit: recoverer could not release a claim it made by mistake; its lease will lapse", ev)
		}
		return ev
	}
	r.attempts[key]++
	if len(r.attempts) > maxTracked {
		clear(r.attempts)
		r.attempts[key] = 1
	}
	ev.Token, ev.PreviousToken, ev.Attempt = res.Token, res.Token-1, r.attempts[key]
	claim := Claim{
		Scope: rec.Scope, DownstreamKey: rec.Scope.DownstreamKey(),
		Token: res.Token, PreviousToken: res.Token - 1,
		CreatedAt: rec.CreatedAt, Attempt: ev.Attempt,
	}
	// The lease counts from no earlier than sent, plus what the store
	// says it moved it by.
	deadline := sent.Add(max(res.LeaseDelay, 0) + r.cfg.Lease - r.cfg.Lease/leaseMarginDivisor)
	fnCtx, cancel := context.WithDeadline(ctx, deadline)
	resp, err := r.call(fnCtx, claim)
	cancel()

	switch {
	case err != nil:
		ev.Outcome, ev.Err = OutcomeFailed, err
		level := slog.LevelWarn
		switch {
		case ctx.Err() != nil:
			level = slog.LevelInfo // closed mid-call: the next start tries again
		case ev.Attempt >= r.cfg.MaxAttempts:
			level = slog.LevelError
		}
		r.log(ctx, level, "idemkit: recovery failed; the claim is left for a later pass (or a client retry)", ev,
			slog.Int("max_attempts", r.cfg.MaxAttempts))
		return ev
	case resp == nil:
		if err := r.release(ctx, rec.Scope, res.Token); err != nil {
			ev.Outcome, ev.Err = OutcomeFailed, fmt.Errorf("release: %w", err)
			r.log(ctx, slog.LevelWarn, "idemkit: recoverer could not release the claim", ev)
			return ev
		}
		delete(r.attempts, key)
		ev.Outcome = OutcomeReleased
		r.log(ctx, slog.LevelInfo, "idemkit: recoverer released a claim whose effect was never made; a retry runs the handler", ev)
		return ev
	}
	if resp.Status < 100 || resp.Status > 999 {
		ev.Outcome, ev.Err = OutcomeFailed, fmt.Errorf("the RecoverFunc returned status %d", resp.Status)
		r.log(ctx, slog.LevelError, "idemkit: recovery failed; the claim is left for a later pass", ev)
		return ev
	}
	stored := *resp
	if stored.Body == nil && !stored.BodyOmitted {
		stored.Body = []byte{}
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StoreTimeout)
	err = r.store.Complete(callCtx, rec.Scope, res.Token, r.timeNowFunc(), &stored)
	cancel()
	if err != nil {
		ev.Outcome, ev.Err = OutcomeFailed, fmt.Errorf("complete: %w", err)
		r.log(ctx, slog.LevelWarn, "idemkit: recoverer could not store the recovered response", ev)
		return ev
	}
	delete(r.attempts, key)
	ev.Outcome = OutcomeCompleted
	r.log(ctx, slog.LevelInfo, "idemkit: recoverer completed a claim whose holder died; retries replay the recovered response", ev,
		slog.Int("status", resp.Status))
	return ev
}

// call runs the RecoverFunc, turning a panic into an error.
func (r *Recoverer) call(ctx context.Context, c Claim) (resp *server.StoredResponse, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("the RecoverFunc panicked: %v", p)
		}
	}()
	return r.fn(ctx, c)
}

func (r *Recoverer) release(ctx context.Context, sc server.Scope, token int64) error {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.StoreTimeout)
	defer cancel()
	return r.store.Release(callCtx, sc, token)
}

// log writes one line about ev, the key and the principal hashed.
func (r *Recoverer) log(ctx context.Context, level slog.Level, msg string, ev Event, extra ...slog.Attr) {
	attrs := []slog.Attr{
		slog.String("principal", redact.Hash(ev.Scope.Principal)),
		slog.String("endpoint", ev.Scope.Endpoint),
		slog.String("key", redact.Hash(ev.Scope.Key)),
		slog.String("outcome", string(ev.Outcome)),
	}
	if ev.Token != 0 {
		attrs = append(attrs, slog.Int64("token", ev.Token), slog.Int64("previous_token", ev.PreviousToken), slog.Int("attempt", ev.Attempt))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.Any("error", ev.Err))
	}
	r.cfg.Logger.LogAttrs(context.WithoutCancel(ctx), level, msg, append(attrs, extra...)...)
}
