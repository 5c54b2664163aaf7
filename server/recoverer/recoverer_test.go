package recoverer

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// A holder that made the charge and died before storing the response: the
// recoverer finds the lapsed claim, the RecoverFunc reconstructs the
// response from the downstream, and the client's retry replays it byte for
// byte without charging again.
func TestRecoverer_CompletesAClaimWhoseHolderDiedAfterTheEffect(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open opener) {
		d := newDownstream()
		dieHolding(t, open, d, "k-after", "after")
		require.Equal(t, int64(1), d.n.Load(), "the dead holder made the charge")

		store, _ := open(t)
		var ev events
		var log quiet
		var got []Claim
		r, err := New(store, func(ctx context.Context, c Claim) (*server.StoredResponse, error) {
			got = append(got, c)
			return recoverFrom(d)(ctx, c)
		}, testConfig(&ev, &log))
		require.NoError(t, err)
		passUntil(t, r, &ev, OutcomeCompleted)

		require.Len(t, got, 1)
		c := got[0]
		require.Equal(t, server.Scope{Principal: "alice", Endpoint: "*", Key: "k-after"}, c.Scope)
		require.Equal(t, c.Scope.DownstreamKey(), c.DownstreamKey)
		require.Greater(t, c.Token, c.PreviousToken, "the recoverer holds a newer fencing token")
		require.Equal(t, c.PreviousToken+1, c.Token)

		rec, err := store.Get(t.Context(), c.Scope, time.Now())
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State)
		require.Equal(t, c.Token, rec.Token)

		api := newApp(t, store, d, nil, nil)
		retry := api.post(t, "k-after")
		want := render(d.charges[c.DownstreamKey])
		require.Equal(t, want.Status, retry.status)
		require.Equal(t, "true", retry.header.Get(wire.HeaderReplayed))
		require.Equal(t, want.Header.Get("Content-Type"), retry.header.Get("Content-Type"))
		require.Equal(t, string(want.Body), string(retry.body), "the retry replays the recovered response byte for byte")
		require.Zero(t, api.runs.Load(), "the retry did not run the handler")
		require.Equal(t, int64(1), d.n.Load(), "one charge")

		st := r.Stats()
		require.Equal(t, int64(1), st.Outcomes[OutcomeCompleted])
		require.Contains(t, log.String(), "recoverer completed a claim")
		require.Contains(t, log.String(), redact.Hash("k-after"), "the log names the key by its hash")
		require.NotContains(t, log.String(), "k-after", "the log never shows the key")
		require.NotContains(t, log.String(), "alice", "the log never shows the principal")
	})
}

// A holder that died before the charge: the RecoverFunc finds no charge
// and releases the claim, so the client's retry runs the handler, once.
func TestRecoverer_ReleasesAClaimWhoseHolderDiedBeforeTheEffect(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open opener) {
		d := newDownstream()
		dieHolding(t, open, d, "k-before", "before")
		require.Zero(t, d.n.Load(), "the dead holder made no charge")

		store, _ := open(t)
		var ev events
		r, err := New(store, recoverFrom(d), testConfig(&ev, nil))
		require.NoError(t, err)
		passUntil(t, r, &ev, OutcomeReleased)

		_, err = store.Get(t.Context(), server.Scope{Principal: "alice", Endpoint: "*", Key: "k-before"}, time.Now())
		require.ErrorIs(t, err, server.ErrRecordNotFound, "released: the key is free")

		api := newApp(t, store, d, nil, nil)
		retry := api.post(t, "k-before")
		require.Equal(t, http.StatusCreated, retry.status)
		require.Empty(t, retry.header.Get(wire.HeaderReplayed))
		require.Equal(t, int64(1), api.runs.Load(), "the retry ran the handler once")
		require.Equal(t, int64(1), d.n.Load(), "one charge")
		again := api.post(t, "k-before")
		require.Equal(t, string(retry.body), string(again.body))
		require.Equal(t, int64(1), api.runs.Load())
	})
}

// Two recoverers and a client retry race on one lapsed claim: the store's
// takeover lets exactly one of them act.
func TestRecoverer_TwoRecoverersAndARetryRaceExactlyOneActs(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open opener) {
		d := newDownstream()
		dieHolding(t, open, d, "k-race", "after")
		scope := server.Scope{Principal: "alice", Endpoint: "*", Key: "k-race"}

		// Wait until the dead holder's lease has lapsed by the store's
		// clock: a probe claim with a wrong fingerprint never takes over,
		// so read the record instead and wait for its lease end to pass.
		store, _ := open(t)
		rec, err := store.Get(t.Context(), scope, time.Now())
		require.NoError(t, err)
		require.Eventually(t, func() bool { return time.Now().After(rec.LockedUntil.Add(50 * time.Millisecond)) },
			30*time.Second, 10*time.Millisecond)

		var acts atomic.Int64
		start := make(chan struct{})
		retried := make(chan struct{}) // closed once the retry answered
		var ev1, ev2 events
		newRecoverer := func(ev *events) *Recoverer {
			st, _ := open(t)
			r, err := New(st, func(ctx context.Context, c Claim) (*server.StoredResponse, error) {
				acts.Add(1)
				// Hold the claim until the retry has answered: it must not
				// run the handler meanwhile.
				select {
				case <-retried:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return recoverFrom(d)(ctx, c)
			}, testConfig(ev, nil))
			require.NoError(t, err)
			return r
		}
		r1, r2 := newRecoverer(&ev1), newRecoverer(&ev2)
		api := newApp(t, store, d, nil, nil)

		var wg sync.WaitGroup
		var retry result
		errs := make([]error, 2)
		for i, r := range []*Recoverer{r1, r2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = r.Pass(context.Background())
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(retried)
			<-start
			retry = api.post(t, "k-race")
		}()
		close(start)
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])

		require.Equal(t, int64(1), acts.Load()+api.runs.Load(),
			"exactly one of the two recoverers and the retry acted (recoverers %d, handler %d)", acts.Load(), api.runs.Load())
		t.Logf("acted: recoverers %d, handler %d; retry answered %d", acts.Load(), api.runs.Load(), retry.status)
		acted := ev1.count(OutcomeCompleted) + ev2.count(OutcomeCompleted)
		require.Equal(t, int(acts.Load()), acted)
		require.Equal(t, int64(1), d.n.Load(), "one charge")
		switch {
		case api.runs.Load() == 1:
			require.Equal(t, http.StatusCreated, retry.status, "the retry took the claim over")
		case retry.status == http.StatusCreated:
			require.Equal(t, "true", retry.header.Get(wire.HeaderReplayed), "the retry came after the recovery")
		default:
			require.Equal(t, http.StatusConflict, retry.status, "the retry met the recoverer's claim: body %s", retry.body)
		}
		// Whoever acted, the key now replays the charge.
		final := api.post(t, "k-race")
		require.Equal(t, http.StatusCreated, final.status)
		require.Equal(t, string(render(d.charges[scope.DownstreamKey()]).Body), string(final.body))
	})
}

// A live holder, whose heartbeat keeps extending its lease, is never
// touched, however many passes run while its handler works.
func TestRecoverer_NeverTouchesALiveHolder(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open opener) {
		d := newDownstream()
		store, _ := open(t)
		release := make(chan struct{})
		reached := make(chan struct{})
		holder := newApp(t, store, d, nil, func(*http.Request) {
			close(reached)
			<-release
		})
		done := make(chan result, 1)
		go func() { done <- holder.post(t, "k-live") }()
		<-reached

		var ev events
		var called atomic.Int64
		cfg := testConfig(&ev, nil)
		r, err := New(store, func(context.Context, Claim) (*server.StoredResponse, error) {
			called.Add(1)
			return nil, nil
		}, cfg)
		require.NoError(t, err)
		// Pass until the holder has outlived its first lease twice over:
		// only its heartbeat keeps it.
		until := time.Now().Add(2 * holderLease)
		passes := 0
		for time.Now().Before(until) || passes < 3 {
			require.NoError(t, r.Pass(t.Context()))
			passes++
			select {
			case <-time.After(100 * time.Millisecond):
			case <-t.Context().Done():
			}
		}
		require.Zero(t, called.Load(), "the RecoverFunc never saw the live claim")
		for _, e := range ev.all() {
			require.Equal(t, OutcomeSkipped, e.Outcome)
			require.Contains(t, []string{ReasonLive, ReasonHeld}, e.Reason)
		}
		require.NotEmpty(t, ev.all(), "the passes saw the claim")

		close(release)
		res := <-done
		require.Equal(t, http.StatusCreated, res.status, "the holder completed: %s", res.body)
		require.Empty(t, res.header.Get(wire.HeaderReplayed))
		require.Equal(t, int64(1), holder.runs.Load())
	})
}

// A RecoverFunc error leaves the claim in progress; a later pass takes it
// over again and recovers it. After Config.MaxAttempts failures the
// recoverer stops trying.
func TestRecoverer_LeavesAClaimOnErrorForALaterPass(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open opener) {
		d := newDownstream()
		dieHolding(t, open, d, "k-err", "after")
		scope := server.Scope{Principal: "alice", Endpoint: "*", Key: "k-err"}
		store, _ := open(t)

		var ev events
		cfg := testConfig(&ev, nil)
		cfg.Lease = 200 * time.Millisecond // the failed attempt's claim lapses soon
		cfg.MaxAttempts = 3
		var fail atomic.Bool
		fail.Store(true)
		var tokens []int64
		errDown := errors.New("processor unreachable")
		r, err := New(store, func(ctx context.Context, c Claim) (*server.StoredResponse, error) {
			tokens = append(tokens, c.Token)
			if fail.Load() {
				return nil, errDown
			}
			return recoverFrom(d)(ctx, c)
		}, cfg)
		require.NoError(t, err)

		passUntil(t, r, &ev, OutcomeFailed)
		failed := ev.all()[len(ev.all())-1]
		require.ErrorIs(t, failed.Err, errDown)
		require.Equal(t, 1, failed.Attempt)
		rec, err := store.Get(t.Context(), scope, time.Now())
		require.NoError(t, err)
		require.Equal(t, server.StateInProgress, rec.State, "left in progress")
		require.Equal(t, failed.Token, rec.Token, "under the recoverer's token, until its lease lapses")

		fail.Store(false)
		passUntil(t, r, &ev, OutcomeCompleted)
		require.Len(t, tokens, 2)
		require.Equal(t, tokens[0]+1, tokens[1], "the later pass took the claim over anew")
		rec, err = store.Get(t.Context(), scope, time.Now())
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State)
	})
}

// After Config.MaxAttempts failed attempts on one claim the recoverer
// leaves it to the client (OutcomeSkipped, ReasonGaveUp); a client retry
// then takes it over as usual.
func TestRecoverer_GivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	eachBackend(t, testGivesUpAfterMaxAttempts)
}

// testGivesUpAfterMaxAttempts runs on every store: the attempts are
// counted by the record's creation, which a takeover must keep.
func testGivesUpAfterMaxAttempts(t *testing.T, open opener) {
	d := newDownstream()
	dieHolding(t, open, d, "k-bounded", "after")
	store, _ := open(t)
	var ev events
	cfg := testConfig(&ev, nil)
	cfg.Lease = 100 * time.Millisecond
	cfg.MaxAttempts = 2
	cfg.Batch = 1 // the claim given up on must not crowd out the next one
	var calls atomic.Int64
	r, err := New(store, func(ctx context.Context, c Claim) (*server.StoredResponse, error) {
		if c.Scope.Key != "k-bounded" {
			return recoverFrom(d)(ctx, c)
		}
		calls.Add(1)
		return nil, errors.New("still unknown")
	}, cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		require.NoError(t, r.Pass(t.Context()))
		for _, e := range ev.all() {
			if e.Reason == ReasonGaveUp {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(2), calls.Load(), "the RecoverFunc ran MaxAttempts times")
	require.Equal(t, int64(2), r.Stats().Outcomes[OutcomeFailed])
	require.Equal(t, 1, r.Stats().GivenUp, "the claim given up on is counted while in flight")

	// A newer dead claim is still found, though Batch is 1 and the
	// older one given up on stays in flight.
	dieHolding(t, open, d, "k-next", "after")
	passUntil(t, r, &ev, OutcomeCompleted)
	require.Equal(t, int64(2), calls.Load(), "the claim given up on was not tried again")

	// The client comes back: its retry takes the claim over and runs.
	require.Eventually(t, func() bool {
		rec, err := store.Get(t.Context(), server.Scope{Principal: "alice", Endpoint: "*", Key: "k-bounded"}, time.Now())
		require.NoError(t, err)
		return time.Now().After(rec.LockedUntil)
	}, 30*time.Second, 20*time.Millisecond)
	api := newApp(t, store, d, nil, nil)
	res := api.post(t, "k-bounded")
	require.Equal(t, http.StatusCreated, res.status)
	require.Equal(t, int64(2), d.n.Load(), "one charge per key: the retry's is deduplicated downstream by the key")
	require.NoError(t, r.Pass(t.Context()))
	require.Zero(t, r.Stats().GivenUp, "the retry completed it: no longer in flight, no longer given up on")
}

// Start runs passes in the background until Close.
func TestStart_RecoversInTheBackground(t *testing.T) {
	t.Parallel()
	open := backends[0].setup(t)
	d := newDownstream()
	dieHolding(t, open, d, "k-bg", "after")
	store, _ := open(t)
	var ev events
	cfg := testConfig(&ev, nil)
	cfg.Interval = 50 * time.Millisecond
	r, err := Start(store, recoverFrom(d), cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ev.count(OutcomeCompleted) == 1 }, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close twice")
	st := r.Stats()
	require.Positive(t, st.Passes)
	require.False(t, st.LastSuccess.IsZero())
	require.Equal(t, 50*time.Millisecond, st.Interval)
}

func TestNew_Errors(t *testing.T) {
	t.Parallel()
	store, _ := backends[0].setup(t)(t)
	fn := recoverFrom(newDownstream())

	_, err := New(store, nil, nil)
	require.ErrorIs(t, err, errNilFunc)
	_, err = New(nil, fn, nil)
	require.Error(t, err)
	_, err = New(store, fn, &Config{Interval: -time.Second, Batch: -1, MaxAttempts: -1})
	require.Error(t, err)
	for _, field := range []string{"Interval", "Batch", "MaxAttempts"} {
		require.Contains(t, err.Error(), "Config."+field)
	}

	// A store without a listing: its methods only (no InFlight).
	_, err = New(struct{ server.Store }{store}, fn, nil)
	require.ErrorIs(t, err, ErrNoListing)
	require.True(t, strings.Contains(err.Error(), "InFlight"), "got %v", err)

	r, err := New(store, fn, nil)
	require.NoError(t, err)
	require.NoError(t, r.Close(), "Close of a Recoverer from New")
}

// A RecoverFunc that outlives the recoverer's lease loses the claim to a
// client retry, and its late completion is refused by the token: the
// record keeps the retry's response.
func TestRecoverer_LateCompletionIsFenced(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open opener) {
		d := newDownstream()
		dieHolding(t, open, d, "k-late", "after")
		store, _ := open(t)
		var ev events
		cfg := testConfig(&ev, nil)
		cfg.Lease = 300 * time.Millisecond
		holding := make(chan struct{})
		retried := make(chan struct{})
		var retriedOnce sync.Once
		letGo := func() { retriedOnce.Do(func() { close(retried) }) }
		t.Cleanup(letGo) // a failed assertion must not leave the RecoverFunc blocked
		r, err := New(store, func(ctx context.Context, c Claim) (*server.StoredResponse, error) {
			close(holding)
			<-retried // ignores ctx: a RecoverFunc that overruns its lease
			return &server.StoredResponse{Status: http.StatusCreated, Body: []byte("late")}, nil
		}, cfg)
		require.NoError(t, err)
		passed := make(chan error, 1)
		go func() {
			// Pass until the dead holder's lease has lapsed and the
			// recoverer acted.
			for {
				if err := r.Pass(t.Context()); err != nil || ev.count(OutcomeFailed) > 0 {
					passed <- err
					return
				}
				select {
				case <-time.After(20 * time.Millisecond):
				case <-t.Context().Done():
					passed <- t.Context().Err()
					return
				}
			}
		}()
		select {
		case <-holding:
		case <-time.After(60 * time.Second):
			t.Fatal("the recoverer never took the claim over")
		}

		api := newApp(t, store, d, nil, nil)
		var res result
		require.Eventually(t, func() bool {
			res = api.post(t, "k-late") // 409 while the recoverer's lease holds
			return res.status == http.StatusCreated
		}, 30*time.Second, 50*time.Millisecond)
		require.Empty(t, res.header.Get(wire.HeaderReplayed), "the retry took the claim over and ran")
		letGo()
		require.NoError(t, <-passed)

		evs := ev.all()
		last := evs[len(evs)-1]
		require.Equal(t, OutcomeFailed, last.Outcome)
		require.ErrorIs(t, last.Err, server.ErrLeaseLost, "the late completion is refused by its token")
		require.Zero(t, ev.count(OutcomeCompleted))
		again := api.post(t, "k-late")
		require.Equal(t, "true", again.header.Get(wire.HeaderReplayed))
		require.Equal(t, string(res.body), string(again.body), "the record keeps the retry's response")
		require.Equal(t, int64(1), d.n.Load(), "one charge")
	})
}
