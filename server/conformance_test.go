package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// The outcome table of docs/design.md, row by row, against both stores and in
// both modes.

const mwBody = `{"amount":4000,"currency":"EUR"}`

func TestOutcome_FirstRequestRunsHandler(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		res := b.do(t, mwReq{principal: "alice", keys: []string{"k1"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status, "body %s", res.Body)
		require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, "session=secret", res.Header.Get("Set-Cookie"), "the first response is the handler's, untouched")
		require.Equal(t, "1", res.Header.Get("X-Run"))
		require.Equal(t, strconv.Itoa(len(res.Body)), res.Header.Get("Content-Length"))
		require.EqualValues(t, 1, b.runs.Load())
		require.Equal(t, 1, b.count(t, mwCountEffects))
		require.Equal(t, 1, b.count(t, mwCountRecords))

		ev := b.eventsCopy()
		require.Len(t, ev, 1)
		require.Equal(t, server.OutcomeExecuted, ev[0].Outcome)
		require.Equal(t, http.StatusCreated, ev[0].Status)
		require.Equal(t, server.Scope{Principal: "alice", Endpoint: "*", Key: "k1"}, ev[0].Scope, "keys belong to the principal by default")
		require.EqualValues(t, 1, ev[0].Token)
		require.NoError(t, ev[0].Err)
	})
}

func TestOutcome_CompletedDuplicateIsReplayed(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		first := b.do(t, mwReq{principal: "alice", keys: []string{"k1"}, body: mwBody})
		require.Equal(t, http.StatusCreated, first.Status)

		// Same request: key order, whitespace and the quoted key form do not
		// matter.
		for _, q := range []mwReq{
			{principal: "alice", keys: []string{"k1"}, body: mwBody},
			{principal: "alice", keys: []string{`"k1"`}, body: "{ \"currency\": \"EUR\", \"amount\": 4000.0 }"},
			{principal: "alice", keys: []string{" k1 "}, body: mwBody, contentType: "application/json; charset=utf-8"},
		} {
			res := b.do(t, q)
			require.Equal(t, first.Status, res.Status)
			require.Equal(t, string(first.Body), string(res.Body), "byte for byte")
			require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
			require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))
			require.Equal(t, first.Header.Get("Content-Type"), res.Header.Get("Content-Type"))
			require.Equal(t, first.Header.Get("Location"), res.Header.Get("Location"))
			require.Empty(t, res.Header.Get("Set-Cookie"), "Set-Cookie is never replayed")
			require.Empty(t, res.Header.Get("X-Run"), "headers outside the allowlist are not replayed")
			require.Empty(t, res.Header.Get(wire.HeaderOmitted))
		}
		require.EqualValues(t, 1, b.runs.Load(), "the handler must not run again")
		require.Equal(t, 1, b.count(t, mwCountEffects))
		ev := b.eventsCopy()
		require.Len(t, ev, 4)
		for _, e := range ev[1:] {
			require.Equal(t, server.OutcomeReplayed, e.Outcome)
			require.Equal(t, http.StatusCreated, e.Status)
		}
	})
}

func TestOutcome_HandlerChosen4xxIsStored(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		first := b.do(t, mwReq{path: "/teapot", principal: "alice", keys: []string{"k"}, body: "x", contentType: "text/plain"})
		require.Equal(t, http.StatusTeapot, first.Status)
		again := b.do(t, mwReq{path: "/teapot", principal: "alice", keys: []string{"k"}, body: "x", contentType: "text/plain"})
		require.Equal(t, http.StatusTeapot, again.Status)
		require.Equal(t, "short and stout 1", string(again.Body))
		require.Equal(t, "true", again.Header.Get(wire.HeaderReplayed))
		require.EqualValues(t, 1, b.runs.Load())
	})
}

func TestOutcome_InFlightDuplicateIs409(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.LeaseDuration = 20 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		firstDone := make(chan *mwResponse, 1)
		go func() {
			res, err := b.send(ctx, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
			if err != nil {
				t.Errorf("first request: %v", err)
			}
			firstDone <- res
		}()
		require.Equal(t, "alice", mwRecv(t, b.started))

		res := b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
		p := res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
		require.NotContains(t, p["detail"], "alice")
		retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, retry, 1)
		if mode == server.ModeLease {
			// Estimated from the route's recent durations (none yet, and
			// the first request has just started), never past the lease.
			require.LessOrEqual(t, retry, 2, "Retry-After estimates when the original is done")
		}
		require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))

		// A different body while in flight: in lease mode the committed
		// claim has the fingerprint, so it is a 422; in transactional mode
		// the claim is uncommitted and invisible, so it is a 409.
		res = b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: `{"amount":1}`})
		if mode == server.ModeLease {
			res.requireProblem(t, http.StatusUnprocessableEntity, wire.ProblemKeyReused)
		} else {
			res.requireProblem(t, http.StatusConflict, wire.ProblemInFlight)
		}

		close(b.release)
		first := mwRecv(t, firstDone)
		require.NotNil(t, first)
		require.Equal(t, http.StatusCreated, first.Status)
		require.Empty(t, first.Header.Get(wire.HeaderReplayed))

		// Now it is a replay.
		res = b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status)
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, string(first.Body), string(res.Body))
		require.Equal(t, 1, b.count(t, mwCountEffects))
	})
}

func TestOutcome_DifferentRequestIs422(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody}).Status)

		for name, q := range map[string]mwReq{
			"amount": {principal: "alice", keys: []string{"k"}, body: `{"amount":40.00,"currency":"EUR"}`},
			"query":  {path: "/payments?dry_run=1", principal: "alice", keys: []string{"k"}, body: mwBody},
			"raw":    {principal: "alice", keys: []string{"k"}, body: mwBody, contentType: "text/plain"},
		} {
			res := b.do(t, q)
			p := res.requireProblem(t, http.StatusUnprocessableEntity, wire.ProblemKeyReused)
			require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow), name)
			require.NotContains(t, string(res.Body), "4000", "%s: a problem must not echo the stored request", name)
			require.NotContains(t, p["detail"], "alice")
		}
		require.EqualValues(t, 1, b.runs.Load())
		for _, e := range b.eventsCopy()[1:] {
			require.Equal(t, server.OutcomeMismatch, e.Outcome)
			require.ErrorIs(t, e.Err, server.ErrFingerprintMismatchForTest)
		}
	})
}

func TestOutcome_MissingKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeLease, nil)
		res := b.do(t, mwReq{principal: "alice", body: mwBody})
		res.requireProblem(t, http.StatusBadRequest, wire.ProblemKeyMissing)
		require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))
		require.EqualValues(t, 0, b.runs.Load())
		require.Equal(t, 0, b.count(t, mwCountRecords))
		ev := b.eventsCopy()
		require.Len(t, ev, 1)
		require.Equal(t, server.OutcomeRejected, ev[0].Outcome)
		require.ErrorIs(t, ev[0].Err, server.ErrKeyMissingForTest)

		// With AllowMissingKey the request passes straight through.
		b2 := mwSetup(t, kind, server.ModeTransactional, func(c *server.Config) { c.AllowMissingKey = true })
		for range 2 {
			res = b2.do(t, mwReq{principal: "alice", body: mwBody})
			require.Equal(t, http.StatusCreated, res.Status)
			require.Empty(t, res.Header.Get(wire.HeaderWindow))
			require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		}
		require.EqualValues(t, 2, b2.runs.Load())
		require.Equal(t, 0, b2.count(t, mwCountRecords))
		require.Empty(t, b2.eventsCopy(), "an unkeyed request is not a keyed request: no event")
		// An invalid key is still refused.
		b2.do(t, mwReq{principal: "alice", keys: []string{""}, body: mwBody}).requireProblem(t, http.StatusBadRequest, wire.ProblemKeyInvalid)
	})
}

func TestOutcome_MalformedKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeLease, nil)
		for name, keys := range map[string][]string{
			"empty":      {""},
			"tooLong":    {strings.Repeat("k", 256)},
			"control":    {"a\u0085b"}, // C1 control; net/http refuses C0 ones itself
			"repeated":   {"a", "a"},
			"list":       {`"a", "b"`},
			"badQuoting": {`"abc`},
		} {
			res := b.do(t, mwReq{principal: "alice", keys: keys, body: mwBody})
			p := res.requireProblem(t, http.StatusBadRequest, wire.ProblemKeyInvalid)
			require.NotEmpty(t, p["detail"], name)
		}
		require.EqualValues(t, 0, b.runs.Load())
		require.Equal(t, 0, b.count(t, mwCountRecords))
		// 255 bytes is fine.
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "alice", keys: []string{strings.Repeat("k", 255)}, body: mwBody}).Status)
	})
}

func TestOutcome_BodyTooLarge(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.MaxFingerprintBytes = 64 })
		res := b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: strings.Repeat("x", 65), contentType: "text/plain"})
		res.requireProblem(t, http.StatusRequestEntityTooLarge, wire.ProblemBodyTooLarge)
		require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))
		require.EqualValues(t, 0, b.runs.Load())
		require.Equal(t, 0, b.count(t, mwCountRecords))
		// Exactly at the limit is fingerprinted, and the handler sees the
		// whole body.
		res = b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: strings.Repeat("x", 64), contentType: "text/plain"})
		require.Equal(t, http.StatusCreated, res.Status)
		var got map[string]any
		require.NoError(t, json.Unmarshal(res.Body, &got))
		require.Equal(t, strings.Repeat("x", 64), got["request"])
	})
}

func TestOutcome_NoPrincipalIs401(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeLease, nil)
		res := b.do(t, mwReq{keys: []string{"k"}, body: mwBody})
		p := res.requireProblem(t, http.StatusUnauthorized, wire.ProblemUnauthenticated)
		require.NotContains(t, p["detail"], "X-Principal", "the PrincipalFunc error is not shown to the client")
		require.EqualValues(t, 0, b.runs.Load())
		ev := b.eventsCopy()
		require.Len(t, ev, 1)
		require.ErrorIs(t, ev[0].Err, server.ErrUnauthenticatedForTest)
		require.Equal(t, server.OutcomeRejected, ev[0].Outcome)

		// An empty principal is no principal: it would pool every caller.
		b2 := mwSetup(t, kind, server.ModeLease, func(c *server.Config) {
			c.PrincipalFunc = func(*http.Request) (string, error) { return "", nil }
		})
		b2.do(t, mwReq{keys: []string{"k"}, body: mwBody}).requireProblem(t, http.StatusUnauthorized, wire.ProblemUnauthenticated)
	})
}

func TestOutcome_StoreUnavailableIs503(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		// Break the real store: close its database.
		if b.db != nil {
			require.NoError(t, b.db.Close())
		} else {
			b.pool.Close()
		}
		res := b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})
		p := res.requireProblem(t, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable)
		require.NotEmpty(t, p["detail"])
		require.Equal(t, "1", res.Header.Get("Retry-After"))
		require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))
		require.EqualValues(t, 0, b.runs.Load(), "fail closed: the handler must not run")
		ev := b.eventsCopy()
		require.Len(t, ev, 1)
		require.Equal(t, server.OutcomeStoreError, ev[0].Outcome)
		require.Error(t, ev[0].Err)
	})
}

func TestOutcome_StoreBusyIs503(t *testing.T) {
	t.Parallel()
	// SQLite has one writer: another process holding the write lock makes a
	// transactional claim time out, which is not attributable to the key.
	b := mwSetup(t, mwSQLite, server.ModeTransactional, func(c *server.Config) { c.LockTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	other, err := sqlitestore.Open(ctx, b.path)
	require.NoError(t, err)
	defer other.Close()
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	res := b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})
	res.requireProblem(t, http.StatusServiceUnavailable, wire.ProblemStoreBusy)
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	require.EqualValues(t, 0, b.runs.Load())

	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
	res = b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})
	require.Equal(t, http.StatusCreated, res.Status, "the retry runs once the writer is gone")
	require.EqualValues(t, 1, b.runs.Load())
}

func TestOutcome_5xxReleasesClaim(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		for i := 1; i <= 2; i++ {
			res := b.do(t, mwReq{path: "/fail", principal: "alice", keys: []string{"k"}, body: mwBody})
			require.Equal(t, http.StatusBadGateway, res.Status)
			require.Equal(t, "upstream exploded "+strconv.Itoa(i)+"\n", string(res.Body), "the handler's 5xx is sent as is")
			require.Empty(t, res.Header.Get(wire.HeaderReplayed))
			require.Equal(t, "86400", res.Header.Get(wire.HeaderWindow))
		}
		require.EqualValues(t, 2, b.runs.Load(), "a retry after a 5xx runs the handler again")
		require.Equal(t, 0, b.count(t, mwCountRecords), "nothing stored")
		if mode == server.ModeTransactional {
			require.Equal(t, 0, b.count(t, mwCountEffects), "the effect is rolled back")
		}
		for _, e := range b.eventsCopy() {
			require.Equal(t, server.OutcomeReleased, e.Outcome)
			require.Equal(t, http.StatusBadGateway, e.Status)
		}
		// After the release the key is free for the same request.
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody}).Status)
	})
}

func TestOutcome_PanicReleasesClaim(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, nil)
		for range 2 {
			res := b.do(t, mwReq{path: "/panic", principal: "alice", keys: []string{"k"}, body: mwBody})
			res.requireProblem(t, http.StatusInternalServerError, wire.ProblemHandlerPanic)
			require.NotContains(t, string(res.Body), "partial", "nothing the handler wrote reaches the client")
			require.NotContains(t, string(res.Body), "boom")
		}
		require.EqualValues(t, 2, b.runs.Load())
		require.Equal(t, 0, b.count(t, mwCountRecords))
		if mode == server.ModeTransactional {
			require.Equal(t, 0, b.count(t, mwCountEffects))
		}
		ev := b.eventsCopy()
		require.Equal(t, server.OutcomeReleased, ev[0].Outcome)
		require.ErrorContains(t, ev[0].Err, "boom")

		// http.ErrAbortHandler still aborts the response, after the release.
		_, err := b.send(context.Background(), mwReq{path: "/abort", principal: "alice", keys: []string{"a"}, body: mwBody})
		require.Error(t, err, "the connection is aborted")
		require.Equal(t, 0, b.count(t, mwCountRecords))
	})
}

func TestOutcome_LargeResponseIsPassedThroughNotStored(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.MaxResponseBytes = 2500 })
		first := b.do(t, mwReq{path: "/big", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusOK, first.Status)
		require.Len(t, first.Body, 5000, "the first caller gets the whole body")
		require.Equal(t, `"big-1"`, first.Header.Get("ETag"))
		require.Empty(t, first.Header.Get(wire.HeaderOmitted))

		res := b.do(t, mwReq{path: "/big", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusOK, res.Status)
		require.Empty(t, res.Body)
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, "true", res.Header.Get(wire.HeaderOmitted))
		require.Equal(t, `"big-1"`, res.Header.Get("ETag"))
		require.Equal(t, "application/octet-stream", res.Header.Get("Content-Type"))
		require.EqualValues(t, 1, b.runs.Load(), "a replay of an omitted body never re-runs the handler")
	})
}

func TestOutcome_SafeMethodsPassThrough(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeLease, nil)
		for range 2 {
			res := b.do(t, mwReq{method: http.MethodGet, principal: "alice", keys: []string{"k"}})
			require.Equal(t, http.StatusCreated, res.Status)
			require.Empty(t, res.Header.Get(wire.HeaderWindow))
			require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		}
		require.EqualValues(t, 2, b.runs.Load())
		require.Equal(t, 0, b.count(t, mwCountRecords))
		require.Empty(t, b.eventsCopy())
	})
}

func TestOutcome_EndpointScope(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		// Default: a key belongs to the principal; the fingerprint covers
		// the method and the concrete path, so reuse on another operation
		// is a 422, never a second execution.
		b := mwSetup(t, kind, mode, nil)
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{path: "/payments", principal: "alice", keys: []string{"k"}, body: mwBody}).Status)
		b.do(t, mwReq{path: "/refunds", principal: "alice", keys: []string{"k"}, body: mwBody}).requireProblem(t, http.StatusUnprocessableEntity, wire.ProblemKeyReused)
		require.Equal(t, http.StatusCreated, b.do(t, mwReq{method: http.MethodPut, path: "/items/1", principal: "alice", keys: []string{"i"}, body: mwBody}).Status)
		b.do(t, mwReq{method: http.MethodPut, path: "/items/2", principal: "alice", keys: []string{"i"}, body: mwBody}).requireProblem(t, http.StatusUnprocessableEntity, wire.ProblemKeyReused)
		require.Equal(t, "*", b.eventsCopy()[0].Scope.Endpoint)
		require.EqualValues(t, 2, b.runs.Load())

		// Explicit operation names scope keys per operation.
		named := mwSetup(t, kind, mode, func(c *server.Config) {
			c.EndpointFunc = func(r *http.Request) string { return "op" + strings.ReplaceAll(r.URL.Path, "/", ".") }
		})
		require.Equal(t, http.StatusCreated, named.do(t, mwReq{path: "/payments", principal: "alice", keys: []string{"k"}, body: mwBody}).Status)
		res := named.do(t, mwReq{path: "/refunds", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, "op.payments", named.eventsCopy()[0].Scope.Endpoint)
		require.EqualValues(t, 2, named.runs.Load())
	})
}

func TestOutcome_ExpiryAndSweep(t *testing.T) {
	t.Parallel()
	forEachStoreAndMode(t, func(t *testing.T, kind string, mode server.Mode) {
		b := mwSetup(t, kind, mode, func(c *server.Config) { c.Window = time.Hour })
		first := b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, first.Status)
		require.Equal(t, "3600", first.Header.Get(wire.HeaderWindow))

		// Within the window: always a replay, even after a sweep.
		b.clock.Advance(59 * time.Minute)
		n, err := b.store.Sweep(context.Background(), b.clock.Now())
		require.NoError(t, err)
		require.Zero(t, n)
		res := b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, string(first.Body), string(res.Body))

		// After the window, before any sweep: a new request (the expired
		// row is absent), with a new effect.
		b.clock.Advance(2 * time.Minute)
		res = b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.EqualValues(t, 2, b.runs.Load())

		// After the window and a sweep: a new request too.
		b.clock.Advance(2 * time.Hour)
		n, err = b.store.Sweep(context.Background(), b.clock.Now())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 0, b.count(t, mwCountRecords))
		res = b.do(t, mwReq{principal: "alice", keys: []string{"k"}, body: `{"different":"body is fine now"}`})
		require.Equal(t, http.StatusCreated, res.Status)
		require.Empty(t, res.Header.Get(wire.HeaderReplayed))
		require.EqualValues(t, 3, b.runs.Load())
	})
}

func TestOutcome_LeaseTakeover(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		b := mwSetup(t, kind, server.ModeLease, func(c *server.Config) { c.LeaseDuration = 30 * time.Second })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		firstDone := make(chan *mwResponse, 1)
		go func() {
			res, err := b.send(ctx, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
			if err != nil {
				t.Errorf("first request: %v", err)
			}
			firstDone <- res
		}()
		mwRecv(t, b.started)

		// The lease runs out (the first attempt is stuck): a retry takes the
		// claim over with a new token and runs the handler.
		b.clock.Advance(31 * time.Second)
		secondDone := make(chan *mwResponse, 1)
		go func() {
			res, err := b.send(ctx, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
			if err != nil {
				t.Errorf("second request: %v", err)
			}
			secondDone <- res
		}()
		mwRecv(t, b.started)
		mwSend(t, b.release) // one of the two handlers finishes
		mwSend(t, b.release) // then the other
		first, second := mwRecv(t, firstDone), mwRecv(t, secondDone)
		require.NotNil(t, first)
		require.NotNil(t, second)
		require.Equal(t, http.StatusCreated, first.Status, "a lost lease still sends the response")
		require.Equal(t, http.StatusCreated, second.Status)

		var tookOver, lost *server.Event
		ev := b.eventsCopy()
		for i := range ev {
			if ev[i].TakenOver {
				tookOver = &ev[i]
			} else {
				lost = &ev[i]
			}
		}
		require.NotNil(t, tookOver)
		require.NotNil(t, lost)
		require.EqualValues(t, 2, tookOver.Token)
		require.EqualValues(t, 1, lost.Token)
		require.ErrorIs(t, lost.Err, server.ErrLeaseLost, "the late original's completion is refused")

		// Replays now return the takeover's response.
		res := b.do(t, mwReq{path: "/block", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
		require.Equal(t, string(second.Body), string(res.Body))
	})
}

// A transaction that fails to commit after the handler ran (here: a deferred
// constraint the handler's write violates, checked by the database at
// COMMIT) applies nothing; the client gets a 503 and nothing is stored.
func TestOutcome_CommitFailureRollsBack(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		if kind == mwMySQL {
			return // MySQL checks every constraint at its statement: no COMMIT fails on one
		}
		b := mwSetup(t, kind, server.ModeTransactional, nil)
		ctx := context.Background()
		var insertOrphan string
		if b.db != nil {
			_, err := b.db.ExecContext(ctx, `CREATE TABLE parents (id INTEGER PRIMARY KEY) STRICT`)
			require.NoError(t, err)
			_, err = b.db.ExecContext(ctx, `CREATE TABLE children (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED) STRICT`)
			require.NoError(t, err)
			insertOrphan = `INSERT INTO children (parent) VALUES (42)`
		} else {
			_, err := b.pool.Exec(ctx, `CREATE TABLE parents (id int PRIMARY KEY)`)
			require.NoError(t, err)
			_, err = b.pool.Exec(ctx, `CREATE TABLE children (parent int REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`)
			require.NoError(t, err)
			insertOrphan = `INSERT INTO children (parent) VALUES (42)`
		}
		mux := http.NewServeMux()
		mux.Handle("POST /orphan", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.runs.Add(1)
			if err := b.insertEffect(r, "orphan"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			var err error
			if tx, ok := sqlitestore.Tx(r.Context()); ok {
				_, err = tx.ExecContext(r.Context(), insertOrphan)
			} else if tx, ok := pgstore.Tx(r.Context()); ok {
				_, err = tx.Exec(r.Context(), insertOrphan)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("created, supposedly"))
		})))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		b.srv = srv

		res := b.do(t, mwReq{path: "/orphan", principal: "alice", keys: []string{"k"}, body: mwBody})
		res.requireProblem(t, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable)
		require.NotContains(t, string(res.Body), "supposedly", "the handler's response is not sent when its transaction did not commit")
		require.EqualValues(t, 1, b.runs.Load())
		require.Equal(t, 0, b.count(t, mwCountRecords))
		require.Equal(t, 0, b.count(t, mwCountEffects))
		ev := b.eventsCopy()
		require.Len(t, ev, 1)
		require.Equal(t, server.OutcomeStoreError, ev[0].Outcome)
		require.Error(t, ev[0].Err)
	})
}

// In lease mode the effect has happened once the handler returns: if the
// response cannot be stored, it is still sent (and the failure reported),
// rather than inviting a retry that would repeat the effect at once.
func TestOutcome_LeaseCompleteFailureStillSends(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, kind string) {
		// The completion is retried while the lease lasts; a short lease
		// makes the unreachable store's lease lapse quickly.
		b := mwSetup(t, kind, server.ModeLease, func(c *server.Config) { c.LeaseDuration = 600 * time.Millisecond })
		mux := http.NewServeMux()
		mux.Handle("POST /charge", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.runs.Add(1)
			// The store goes away while the handler runs.
			if b.db != nil {
				_ = b.db.Close()
			} else {
				b.pool.Close()
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("charged"))
		})))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		b.srv = srv

		res := b.do(t, mwReq{path: "/charge", principal: "alice", keys: []string{"k"}, body: mwBody})
		require.Equal(t, http.StatusCreated, res.Status)
		require.Equal(t, "charged", string(res.Body))
		ev := b.eventsCopy()
		require.Len(t, ev, 1)
		require.Equal(t, server.OutcomeExecuted, ev[0].Outcome)
		require.Error(t, ev[0].Err, "the store failure is reported")
	})
}

// A completed key is replayed at once in transactional mode even while
// another key's handler holds the transaction (on SQLite: the only writer),
// because a replay is answered from a plain read of the completed record.
func TestOutcome_ReplayDoesNotWaitForWriter(t *testing.T) {
	t.Parallel()
	for _, kind := range mwStoreKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := mwSetup(t, kind, server.ModeTransactional, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first := b.do(t, mwReq{path: "/payments", principal: "alice", keys: []string{"done"}, body: mwBody})
			require.Equal(t, http.StatusCreated, first.Status)

			blocked := make(chan *mwResponse, 1)
			go func() {
				res, err := b.send(ctx, mwReq{path: "/block", principal: "alice", keys: []string{"slow"}, body: mwBody})
				if err != nil {
					t.Errorf("blocked request: %v", err)
				}
				blocked <- res
			}()
			require.Equal(t, "alice", mwRecv(t, b.started))

			res := b.do(t, mwReq{path: "/payments", principal: "alice", keys: []string{"done"}, body: mwBody})
			require.Equal(t, http.StatusCreated, res.Status, "replay while another transaction is open")
			require.Equal(t, "true", res.Header.Get(wire.HeaderReplayed))
			require.Equal(t, string(first.Body), string(res.Body))

			res = b.do(t, mwReq{path: "/payments", principal: "alice", keys: []string{"done"}, body: `{"amount":2}`})
			res.requireProblem(t, http.StatusUnprocessableEntity, wire.ProblemKeyReused)

			close(b.release)
			require.Equal(t, http.StatusCreated, mwRecv(t, blocked).Status)
			require.Equal(t, 2, b.count(t, mwCountEffects))
		})
	}
}
