package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/testredis"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// crashTarget returns the database of a crash-point test: a SQLite file in
// dir or a fresh PostgreSQL schema.
func crashTarget(t *testing.T, store, dir string) string {
	t.Helper()
	if store == storePostgres {
		return testpg.SchemaDSN(t)
	}
	return filepath.Join(dir, "idem.db")
}

// startServerChild starts a crash-point server child and returns it with
// its URL.
func startServerChild(ctx context.Context, t *testing.T, name string, spec serverSpec) (*proc, string) {
	t.Helper()
	var stderr lockedBuffer
	p := mustStart(t, name, childCmd(roleServer, spec), &stderr)
	u, err := p.listenURL(ctx)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	return p, u
}

// reply is one HTTP response, read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) replayed() bool { return r.header.Get(wire.HeaderReplayed) == "true" }

// post sends one keyed POST as principal and reads the whole answer.
func post(ctx context.Context, url, principal, key, contentType string, body []byte) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+principal)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// postUntilDone retries a keyed POST while the server answers 409 (a claim
// still held by a dead process, until its lease runs out), polling until ctx
// ends. It returns the final answer and whether a 409 was seen.
func postUntilDone(ctx context.Context, t *testing.T, url, principal, key string, body []byte) (reply, bool) {
	t.Helper()
	saw409 := false
	for {
		r, err := post(ctx, url, principal, key, "application/json", body)
		require.NoError(t, err)
		if r.status != http.StatusConflict {
			return r, saw409
		}
		saw409 = true
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		require.Contains(t, string(r.body), wire.ProblemTypeBase+wire.ProblemInFlight)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		require.NoError(t, err, "a 409 carries Retry-After in seconds")
		require.GreaterOrEqual(t, ra, 1)
		poll := time.NewTimer(100 * time.Millisecond)
		select {
		case <-poll.C:
		case <-ctx.Done():
			poll.Stop()
			t.Fatalf("still 409 when the deadline passed: %v", ctx.Err())
		}
	}
}

// fileLines returns the lines of path; none if it does not exist.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
}

// inFlight sends a request in the background. The server is to be killed
// while handling it: the channel gets nil once the request failed (or got a
// 5xx), and an error if it got a real answer.
func inFlight(ctx context.Context, url, principal, key string, body []byte) <-chan error {
	ch := make(chan error, 1)
	go func() {
		r, err := post(ctx, url, principal, key, "application/json", body)
		if err == nil && r.status < 500 {
			ch <- fmt.Errorf("got an answer from a server that should have died: %d %s", r.status, r.body)
			return
		}
		ch <- nil
	}()
	return ch
}

var crashStores = []string{storeSQLite, storePostgres}

// TestCrashPoint_AfterClaimBeforeEffect kills a lease-mode server after its
// claim committed and before the handler's effect. The record is left
// in_progress; a retry answers 409 until the lease runs out, then takes the
// claim over (token 2) and the effect happens exactly once.
func TestCrashPoint_AfterClaimBeforeEffect(t *testing.T) {
	t.Parallel()
	for _, store := range crashStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 60*time.Second)
			dir := t.TempDir()
			spec := serverSpec{Store: store, Target: crashTarget(t, store, dir), Mode: "lease", Lease: 1500 * time.Millisecond,
				Effect: effectFile, EffectFile: filepath.Join(dir, "effects.log"), Block: blockBefore}
			const key, body = "claim-then-crash", `{"n":1}`

			gen1, url := startServerChild(ctx, t, "server#1", spec)
			died := inFlight(ctx, url+"/effects", "alice", key, []byte(body))
			_, err := gen1.waitLine(ctx, "CLAIMED "+key)
			require.NoError(t, err)
			insp := openInspector(t, store, spec.Target)
			state, token, found, err := insp.record(ctx, "alice", key)
			require.NoError(t, err)
			require.True(t, found, "the lease-mode claim is committed before the handler runs")
			require.Equal(t, string(server.StateInProgress), state)
			require.EqualValues(t, 1, token)
			gen1.kill()
			require.NoError(t, <-died)
			require.Empty(t, fileLines(t, spec.EffectFile), "the handler died before its effect")

			spec.Block = blockNone
			_, url = startServerChild(ctx, t, "server#2", spec)
			// Another request with the key never takes the dead claim over.
			other, err := post(ctx, url+"/effects", "alice", key, "application/json", []byte(`{"n":"other"}`))
			require.NoError(t, err)
			require.Equal(t, http.StatusUnprocessableEntity, other.status, "body: %s", other.body)
			require.Contains(t, string(other.body), wire.ProblemTypeBase+wire.ProblemKeyReused)

			r, saw409 := postUntilDone(ctx, t, url+"/effects", "alice", key, []byte(body))
			t.Logf("409 while the dead claim's lease ran: %v", saw409)
			require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
			require.False(t, r.replayed(), "the takeover runs the handler")
			state, token, _, err = insp.record(ctx, "alice", key)
			require.NoError(t, err)
			require.Equal(t, string(server.StateCompleted), state)
			require.EqualValues(t, 2, token, "the retry took the lapsed lease over with a new fencing token")
			require.Equal(t, []string{"alice " + key}, fileLines(t, spec.EffectFile), "exactly one effect")

			again, err := post(ctx, url+"/effects", "alice", key, "application/json", []byte(body))
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, again.status)
			require.True(t, again.replayed())
			require.Equal(t, r.body, again.body)
			require.Len(t, fileLines(t, spec.EffectFile), 1)
		})
	}
}

// TestCrashPoint_AfterEffectBeforeResponse kills the server after the
// handler's effect and before the response is stored.
//
// In lease mode the middleware cannot know the effect happened: a retry
// after the lease takes the claim over and runs the handler again. A plain
// external effect therefore happens twice (asserted, as documented for
// ModeLease); forwarding a key derived from server.ScopeFromContext to an
// idempotent downstream keeps it at exactly one. In transactional mode the
// effect is in the transaction the kill aborts: nothing is left, and the
// retry makes exactly one.
func TestCrashPoint_AfterEffectBeforeResponse(t *testing.T) {
	t.Parallel()
	const body = `{"n":2}`

	for _, store := range crashStores {
		t.Run("lease/plain-effect-runs-again/"+store, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 60*time.Second)
			dir := t.TempDir()
			const key = "effect-then-crash"
			spec := serverSpec{Store: store, Target: crashTarget(t, store, dir), Mode: "lease", Lease: 1500 * time.Millisecond,
				Effect: effectFile, EffectFile: filepath.Join(dir, "effects.log"), Block: blockAfter}
			gen1, url := startServerChild(ctx, t, "server#1", spec)
			died := inFlight(ctx, url+"/effects", "alice", key, []byte(body))
			_, err := gen1.waitLine(ctx, "EFFECT "+key)
			require.NoError(t, err)
			gen1.kill()
			require.NoError(t, <-died)
			require.Len(t, fileLines(t, spec.EffectFile), 1, "the effect happened before the kill")
			insp := openInspector(t, store, spec.Target)
			state, _, found, err := insp.record(ctx, "alice", key)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, string(server.StateInProgress), state, "no response was stored")

			spec.Block = blockNone
			_, url = startServerChild(ctx, t, "server#2", spec)
			r, _ := postUntilDone(ctx, t, url+"/effects", "alice", key, []byte(body))
			require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
			require.False(t, r.replayed())
			require.Equal(t, []string{"alice " + key, "alice " + key}, fileLines(t, spec.EffectFile),
				"lease mode: an effect that is not idempotent downstream runs again after the takeover")
		})
	}

	t.Run("lease/forwarded-key-keeps-one-effect", func(t *testing.T) {
		t.Parallel()
		ctx := deadline(t, 60*time.Second)
		dir := t.TempDir()
		const key = "forward-then-crash"
		ds := newIdempotentDownstream(t)
		spec := serverSpec{Store: storeSQLite, Target: crashTarget(t, storeSQLite, dir), Mode: "lease", Lease: 1500 * time.Millisecond,
			Effect: effectDownstream, DownstreamURL: ds.srv.URL, Block: blockAfter}
		gen1, url := startServerChild(ctx, t, "server#1", spec)
		died := inFlight(ctx, url+"/effects", "alice", key, []byte(body))
		_, err := gen1.waitLine(ctx, "EFFECT "+key)
		require.NoError(t, err)
		gen1.kill()
		require.NoError(t, <-died)

		spec.Block = blockNone
		_, url = startServerChild(ctx, t, "server#2", spec)
		r, _ := postUntilDone(ctx, t, url+"/effects", "alice", key, []byte(body))
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)

		want := downstreamKey(server.Scope{Principal: "alice", Endpoint: "*", Key: key})
		calls, effects := ds.stats()
		require.Equal(t, []string{want, want}, calls, "the takeover called downstream again, with the same forwarded key")
		require.Equal(t, 1, effects, "the idempotent downstream kept exactly one effect")
	})

	for _, store := range crashStores {
		t.Run("transactional/"+store, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 60*time.Second)
			dir := t.TempDir()
			const key = "tx-effect-then-crash"
			spec := serverSpec{Store: store, Target: crashTarget(t, store, dir), Mode: "transactional", Effect: effectTx, Block: blockAfter}
			gen1, url := startServerChild(ctx, t, "server#1", spec)
			died := inFlight(ctx, url+"/effects", "alice", key, []byte(body))
			_, err := gen1.waitLine(ctx, "EFFECT "+key)
			require.NoError(t, err)
			gen1.kill()
			require.NoError(t, <-died)

			insp := openInspector(t, store, spec.Target)
			n, err := insp.count(ctx, `SELECT count(*) FROM effects WHERE key = ?`, key)
			require.NoError(t, err)
			require.Zero(t, n, "the kill aborted the transaction: no effect")
			_, _, found, err := insp.record(ctx, "alice", key)
			require.NoError(t, err)
			require.False(t, found, "the kill aborted the transaction: no claim")

			spec.Block = blockNone
			_, url = startServerChild(ctx, t, "server#2", spec)
			r, _ := postUntilDone(ctx, t, url+"/effects", "alice", key, []byte(body))
			require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
			require.False(t, r.replayed())
			again, err := post(ctx, url+"/effects", "alice", key, "application/json", []byte(body))
			require.NoError(t, err)
			require.True(t, again.replayed())
			n, err = insp.count(ctx, `SELECT count(*) FROM effects WHERE key = ?`, key)
			require.NoError(t, err)
			require.Equal(t, 1, n, "exactly one effect")
		})
	}
}

// idempotentDownstream is a downstream service that deduplicates by
// Idempotency-Key: a key seen before gets the same answer and no new effect.
type idempotentDownstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []string
	effects map[string]bool
}

func newIdempotentDownstream(t *testing.T) *idempotentDownstream {
	d := &idempotentDownstream{effects: map[string]bool{}}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		d.mu.Lock()
		d.calls = append(d.calls, key)
		d.effects[key] = true
		d.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *idempotentDownstream) stats() (calls []string, effects int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...), len(d.effects)
}

// TestCrashPoint_AfterReplyBeforeRecord kills a client process after the
// server replied (the payment is made and its response stored) and before
// the client recorded the outcome. A new client process resumes the intent
// after the dead one's lease, gets the replay, and the ledger holds exactly
// the one payment whose id the client finally records.
func TestCrashPoint_AfterReplyBeforeRecord(t *testing.T) {
	t.Parallel()
	for _, store := range crashStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 90*time.Second)
			bins := binaries(t)
			dir := t.TempDir()
			target, args := paymentsTarget(t, store, dir)
			srv := startPayments(ctx, t, bins.payments, &lockedBuffer{}, args...)
			queue := filepath.Join(dir, "client.queue")
			const key = "reply-then-client-crash"

			var stderr lockedBuffer
			c1 := mustStart(t, "client#1", childCmd(roleClient, clientSpec{Kind: clientHoldResponse, Queue: queue, URL: srv.URL(), Account: "alice", Key: key}), &stderr)
			_, err := c1.waitLine(ctx, "RESPONSE 201")
			require.NoError(t, err, "stderr:\n%s", stderr.String())
			c1.kill()

			insp := openInspector(t, store, target)
			rows, err := insp.payments(ctx)
			require.NoError(t, err)
			require.Len(t, rows, 1, "the server made the payment")
			require.Equal(t, key, rows[0].Key)

			in := queueIntent(ctx, t, queue, key)
			require.Equal(t, idemkit.StatePending, in.State, "the client died before recording the outcome")
			require.Nil(t, in.Outcome)

			c2 := mustStart(t, "client#2", childCmd(roleClient, clientSpec{Kind: clientResume, Queue: queue, Account: "alice"}), &stderr)
			require.NoError(t, c2.wait(ctx), "stderr:\n%s", stderr.String())

			in = queueIntent(ctx, t, queue, key)
			require.Equal(t, idemkit.StateSucceeded, in.State, "last error: %s", in.LastError)
			require.NotNil(t, in.Outcome)
			require.Equal(t, http.StatusCreated, in.Outcome.Status)
			require.True(t, in.Outcome.Replayed, "the resumed attempt got the stored response")
			require.Equal(t, 2, in.Attempts)
			var p apiPayment
			require.NoError(t, json.Unmarshal(in.Outcome.Body, &p))
			rows, err = insp.payments(ctx)
			require.NoError(t, err)
			require.Len(t, rows, 1, "exactly one effect")
			require.Equal(t, rows[0].ID, p.ID, "the client recorded the payment that was made")
		})
	}
}

// TestCrashPoint_AfterCommitBeforeSend kills a client process right after
// Submit returned (the intent is on disk) and before anything was sent.
// The idemkit CLI resumes the queue: it sends with the stored key, once,
// and the ledger holds exactly one payment.
func TestCrashPoint_AfterCommitBeforeSend(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 90*time.Second)
	bins := binaries(t)
	dir := t.TempDir()
	target, args := paymentsTarget(t, storeSQLite, dir)
	srvLog := &lockedBuffer{}
	srv := startPayments(ctx, t, bins.payments, srvLog, args...)
	queue := filepath.Join(dir, "client.queue")
	const key = "commit-then-client-crash"

	var stderr lockedBuffer
	c1 := mustStart(t, "client#1", childCmd(roleClient, clientSpec{Kind: clientSubmitBlock, Queue: queue, URL: srv.URL(), Account: "alice", Key: key}), &stderr)
	line, err := c1.waitLine(ctx, "SUBMITTED ")
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	c1.kill()
	f := strings.Fields(line)
	require.Len(t, f, 3)
	id := f[1]
	require.Equal(t, key, f[2])

	insp := openInspector(t, storeSQLite, target)
	rows, err := insp.payments(ctx)
	require.NoError(t, err)
	require.Empty(t, rows, "nothing was sent")
	require.NotContains(t, srvLog.String(), key, "the server never saw the key")

	run := exec.CommandContext(ctx, bins.idemkit, "run", "--queue", queue, "--until-done", "-H", "Authorization: Bearer alice")
	out, err := run.CombinedOutput()
	require.NoError(t, err, "idemkit run: %s", out)

	ls := exec.CommandContext(ctx, bins.idemkit, "ls", "--queue", queue, "--json")
	out, err = ls.Output()
	require.NoError(t, err)
	var got []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "ls line %q", sc.Text())
		got = append(got, m)
	}
	require.Len(t, got, 1, "idemkit ls: %s", out)
	require.Equal(t, id, got[0]["id"])
	require.Equal(t, key, got[0]["key"])
	require.Equal(t, "succeeded", got[0]["state"])
	require.EqualValues(t, 1, got[0]["attempts"], "sent once")
	require.EqualValues(t, 201, got[0]["status"])
	require.Equal(t, false, got[0]["replayed"])

	rows, err = insp.payments(ctx)
	require.NoError(t, err)
	require.Len(t, rows, 1, "exactly one effect")
	require.Equal(t, key, rows[0].Key, "sent with the key minted before the crash")
	require.Equal(t, "alice", rows[0].Account)
}

// paymentsTarget returns the database of a payments server and the flags
// that point it there (transactional mode, a one-hour window).
func paymentsTarget(t *testing.T, store, dir string) (target string, args []string) {
	t.Helper()
	args = []string{"--window", "1h", "--sweep", "0"}
	if store == storePostgres {
		target = testpg.SchemaDSN(t)
		return target, append(args, "--dsn", target)
	}
	target = filepath.Join(dir, "payments.db")
	if store == storeRedis {
		// A Redis of the test's own: the records of one test cannot meet
		// another's; the ledger stays in the SQLite file.
		return target, append(args, "--dsn", testredis.Start(t).URL(), "--db", target)
	}
	return target, append(args, "--db", target)
}

// queueIntent reads the intent with key from a queue file no process is
// using.
func queueIntent(ctx context.Context, t *testing.T, queue, key string) *idemkit.Intent {
	t.Helper()
	c, err := idemkit.Open(ctx, queue, nil)
	require.NoError(t, err)
	defer c.Close()
	all, err := c.List(ctx, &idemkit.ListOptions{Limit: 10})
	require.NoError(t, err)
	for _, in := range all {
		if in.Key == key {
			return in
		}
	}
	t.Fatalf("no intent with key %s in %s", key, queue)
	return nil
}
