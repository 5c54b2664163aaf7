package server_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// revocations is an AuthorizeReplayFunc over a set of revoked principals,
// recording every replay it was asked about.
type revocations struct {
	mu      sync.Mutex
	revoked map[string]bool
	asked   []server.Replay
}

var errRevoked = errors.New("account revoked")

func (v *revocations) authorize(r *http.Request, rp server.Replay) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if r == nil || r.Header.Get("X-Principal") != rp.Principal {
		panic("the hook must get the duplicate's own request")
	}
	v.asked = append(v.asked, rp)
	if v.revoked[rp.Principal] {
		return errRevoked
	}
	return nil
}

func (v *revocations) set(principal string, revoked bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.revoked == nil {
		v.revoked = make(map[string]bool)
	}
	v.revoked[principal] = revoked
}

func (v *revocations) askedCopy() []server.Replay {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]server.Replay(nil), v.asked...)
}

// A caller whose permission is revoked between the original and the retry
// gets 403 replay-forbidden, never the stored receipt; restored, the same
// retry replays. The hook sees the scope and the stored status.
func TestAuthorizeReplay_RevokedCallerGets403NotTheReceipt(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		auth := &revocations{}
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.AuthorizeReplayFunc = auth.authorize })
		q := mwReq{principal: "alice", keys: []string{"k"}, body: mwBody}
		first := b.do(t, q)
		require.Equal(t, http.StatusCreated, first.Status)
		require.Empty(t, auth.askedCopy(), "a new key is not a replay: the hook does not run")

		auth.set("alice", true)
		res := b.do(t, q)
		p := res.requireProblem(t, http.StatusForbidden, wire.ProblemReplayForbidden)
		require.NotContains(t, string(res.Body), `"run"`, "nothing of the stored body")
		require.NotContains(t, p["detail"], "alice")
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.Empty(t, res.Header.Get("Location"), "no stored header either")
		require.Empty(t, res.Header.Get("Retry-After"))
		require.EqualValues(t, 1, b.runs.Load(), "a refused replay never runs the handler")

		asked := auth.askedCopy()
		require.Len(t, asked, 1)
		require.Equal(t, "alice", asked[0].Principal)
		require.Equal(t, "*", asked[0].Endpoint)
		require.Equal(t, "k", asked[0].Key)
		require.Equal(t, http.StatusCreated, asked[0].Status)
		require.False(t, asked[0].CreatedAt.IsZero())

		evs := b.eventsCopy()
		last := evs[len(evs)-1]
		require.Equal(t, server.OutcomeReplayRefused, last.Outcome)
		require.Equal(t, http.StatusForbidden, last.Status)
		require.ErrorIs(t, last.Err, errRevoked)

		auth.set("alice", false)
		again := b.do(t, q)
		require.Equal(t, http.StatusCreated, again.Status)
		require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
		require.Equal(t, string(first.Body), string(again.Body))
	})
}

// The hook guards replays only: a revoked caller's new key runs the
// handler (which authorizes as it always does), and a duplicate of an
// in-flight request still gets 409, never 403.
func TestAuthorizeReplay_NewKeyAndInFlightPathsUnaffected(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		auth := &revocations{}
		auth.set("alice", true)
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.AuthorizeReplayFunc = auth.authorize
			c.LeaseDuration = 20 * time.Second
		})
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "alice", keys: []string{"new"}, body: mwBody}).Status)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		q := mwReq{path: "/block", principal: "alice", keys: []string{"flight"}, body: mwBody}
		first := b.sendAsync(t, ctx, q)
		require.Equal(t, "alice", mwRecv(t, b.started))
		b.do(t, q).requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
		close(b.release)
		require.Equal(t, http.StatusCreated, mwRecv(t, first).Status)
		require.Empty(t, auth.askedCopy())
	})
}

// A duplicate that waited for its original (Config.WaitInFlight) is
// authorized like any replay.
func TestAuthorizeReplay_AppliesAfterWaiting(t *testing.T) {
	t.Parallel()
	forEachWaitStoreAndMode(t, []string{mwSQLite, mwPostgres}, func(t *testing.T, kind string, mode server.Mode) {
		auth := &revocations{}
		b := mwSetup(t, kind, mode, func(c *server.Config) {
			c.AuthorizeReplayFunc = auth.authorize
			c.LeaseDuration = 20 * time.Second
			c.WaitInFlight = 30 * time.Second
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		q := mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody}
		first := b.sendAsync(t, ctx, q)
		require.Equal(t, "alice", mwRecv(t, b.started))
		dup := b.sendAsync(t, ctx, q)
		b.requireWaiting(t, 1)
		auth.set("alice", true) // revoked while the original runs
		close(b.release)
		require.Equal(t, http.StatusCreated, mwRecv(t, first).Status)
		mwRecv(t, dup).requireProblem(t, http.StatusForbidden, wire.ProblemReplayForbidden)
	})
}
