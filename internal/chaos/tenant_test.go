package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/sqlitestore"
)

// probe is one request of the tenant-isolation probe and its answer.
type probe struct {
	principal string
	key       string
	body      []byte
	start     time.Time
	end       time.Time
	r         reply
	err       error
	payment   apiPayment
	// busy counts the 503 store-busy answers retried before r.
	busy int
}

// TestTenantIsolation: tenant A makes N keyed payments held in the handler
// (payments --delay); while they are in flight, tenant B sends every key A
// used, half with A's exact body and half with another; after A's are done,
// tenant C does the same with the halves swapped. B and C must never get
// A's response, never a 409 or 422 (that would reveal that A holds the key):
// each of their requests executes as their own payment. Afterwards every
// tenant's ledger holds only its own payments.
//
// The lease-mode run (SQLite) sends B only once A's claims are visible in
// the store; the transactional run (PostgreSQL, where an uncommitted claim
// is invisible) checks afterwards that every B request started before the
// A request with the same key ended.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		store string
		mode  string
	}{
		{storeSQLite, "lease"},
		{storeRedis, "lease"},
		{storePostgres, "transactional"},
		{storeSQLite, "transactional"},
	} {
		t.Run(tc.store+"/"+tc.mode, func(t *testing.T) {
			t.Parallel()
			n, delay := 12, "1500ms"
			if tc.store == storeSQLite && tc.mode == "transactional" {
				// SQLite has one writer and each held handler holds it:
				// requests queue behind each other and some get 503
				// store-busy (retried below, as a client would).
				n, delay = 4, "300ms"
			}
			ctx := deadline(t, 90*time.Second)
			bins := binaries(t)
			target, args := paymentsTarget(t, tc.store, t.TempDir())
			srv := startPayments(ctx, t, bins.payments, &lockedBuffer{}, append(args, "--mode", tc.mode, "--delay", delay)...)
			insp := openInspector(t, tc.store, target)
			url := srv.URL() + "/v1/payments"

			keys := make([]string, n)
			bodyA := make([][]byte, n)
			for i := range n {
				keys[i] = fmt.Sprintf("shared-key-%02d", i)
				bodyA[i] = fmt.Appendf(nil, `{"amount":%d,"currency":"USD","description":"A's payment %d"}`, 1000+i, i)
			}
			other := func(who string, i int) []byte {
				return fmt.Appendf(nil, `{"amount":%d,"currency":"EUR","description":"%s's own payment %d"}`, 5000+i, who, i)
			}
			send := func(ps []*probe) *sync.WaitGroup {
				var wg sync.WaitGroup
				for _, p := range ps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p.start = time.Now()
						for {
							p.r, p.err = post(ctx, url, p.principal, p.key, "application/json", p.body)
							if p.err != nil || p.r.status != http.StatusServiceUnavailable ||
								!strings.Contains(string(p.r.body), wire.ProblemTypeBase+wire.ProblemStoreBusy) {
								break
							}
							// Busy for everyone alike: it tells nothing about
							// the key. Retry like a client.
							p.busy++
							poll := time.NewTimer(50 * time.Millisecond)
							select {
							case <-poll.C:
							case <-ctx.Done():
								poll.Stop()
							}
						}
						p.end = time.Now()
						if p.err == nil {
							p.err = json.Unmarshal(p.r.body, &p.payment)
						}
					}()
				}
				return &wg
			}

			var as, bs, cs []*probe
			for i := range n {
				as = append(as, &probe{principal: "tenantA", key: keys[i], body: bodyA[i]})
				b := &probe{principal: "tenantB", key: keys[i], body: bodyA[i]}
				c := &probe{principal: "tenantC", key: keys[i], body: other("C", i)}
				if i%2 == 1 {
					b.body, c.body = other("B", i), bodyA[i]
				}
				bs, cs = append(bs, b), append(cs, c)
			}
			aDone := send(as)
			if tc.mode == "lease" {
				// A's claims are committed (in_progress) before its handlers
				// start their delay: wait until all of them are. A claim that
				// already completed (a slow, loaded machine) counts too: B must
				// not see A's record in either state.
				countA := func() (int, error) {
					return insp.count(ctx, `SELECT count(*) FROM idempotency_keys WHERE principal = ?`, "tenantA")
				}
				if tc.store == storeRedis {
					// The test's own Redis holds A's records only.
					countA = redisKeyCounter(ctx, t, args)
				}
				for {
					got, err := countA()
					require.NoError(t, err)
					if got == n {
						break
					}
					poll := time.NewTimer(10 * time.Millisecond)
					select {
					case <-poll.C:
					case <-ctx.Done():
						t.Fatalf("only %d of A's %d claims appeared: %v", got, n, ctx.Err())
					}
				}
			}
			send(bs).Wait()
			aDone.Wait()
			send(cs).Wait()

			aIDs := map[string]bool{}
			for _, a := range as {
				require.NoError(t, a.err)
				require.Equal(t, http.StatusCreated, a.r.status, "A %s: %s", a.key, a.r.body)
				require.Equal(t, "tenantA", a.payment.Account)
				aIDs[a.payment.ID] = true
			}
			for _, p := range append(append([]*probe(nil), bs...), cs...) {
				require.NoError(t, p.err, "%s %s: %s", p.principal, p.key, p.r.body)
				require.Equal(t, http.StatusCreated, p.r.status,
					"%s with A's key %s must execute as its own request, got %d %s", p.principal, p.key, p.r.status, p.r.body)
				require.False(t, p.r.replayed(), "%s got a replay for A's key %s", p.principal, p.key)
				require.Equal(t, p.principal, p.payment.Account, "%s got someone else's payment: %s", p.principal, p.r.body)
				require.False(t, aIDs[p.payment.ID], "%s received A's payment %s", p.principal, p.payment.ID)
				require.NotContains(t, string(p.r.body), "tenantA")
			}
			busy := 0
			for _, p := range append(append(append([]*probe(nil), as...), bs...), cs...) {
				busy += p.busy
			}
			t.Logf("503 store-busy answers retried: %d", busy)
			if tc.mode == "transactional" {
				for i, b := range bs {
					require.True(t, b.start.Before(as[i].end), "B's request for %s started after A's had ended: no overlap was tested", b.key)
				}
			}

			// Every tenant's ledger holds only its own payments.
			want := map[string]int{"tenantA": n, "tenantB": n, "tenantC": n}
			for who, cnt := range want {
				list, err := listPayments(ctx, srv.URL(), who)
				require.NoError(t, err)
				require.Len(t, list, cnt, "GET /v1/payments as %s", who)
				for _, p := range list {
					require.Equal(t, who, p.Account)
					if who != "tenantA" {
						require.False(t, aIDs[p.ID], "%s lists A's payment %s", who, p.ID)
					}
				}
			}
			rows, err := insp.payments(context.WithoutCancel(ctx))
			require.NoError(t, err)
			require.Len(t, rows, 3*n)
		})
	}
}

// TestTenantIsolation_DownstreamKey: two tenants use the same key on a
// lease-mode endpoint whose handler calls one idempotent downstream (say, a
// payment processor account the service shares for all its tenants). If
// the handler forwards the bare client key, as server.ScopeFromContext's
// documentation suggests, the downstream merges the two tenants' calls into
// one effect: tenant B's payment is silently not made and B is handed the
// result of A's. Forwarding a key derived from the whole scope (principal,
// endpoint, key; see downstreamKey) keeps them apart.
func TestTenantIsolation_DownstreamKey(t *testing.T) {
	t.Parallel()
	ctx := deadline(t, 30*time.Second)
	db, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	st, err := sqlitestore.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx))
	mw, err := server.New(st, &server.Config{PrincipalFunc: bearerPrincipal, Mode: server.ModeLease})
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		forward func(server.Scope) string
		effects int
	}{
		{"bare client key merges tenants", func(s server.Scope) string { return s.Key }, 1},
		{"scope-derived key keeps them apart", downstreamKey, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := deadline(t, 30*time.Second) // after t.Parallel: a paused subtest must not run out of time
			ds := newIdempotentDownstream(t)
			mux := http.NewServeMux()
			mux.Handle("POST /effects", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sc, _ := server.ScopeFromContext(r.Context())
				if err := callDownstream(r.Context(), noKeepAlive, ds.srv.URL, tc.forward(sc)); err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				w.WriteHeader(http.StatusCreated)
			})))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			key := "same-key-" + strings.Fields(tc.name)[0]
			for _, who := range []string{"tenantA", "tenantB"} {
				r, err := post(ctx, srv.URL+"/effects", who, key, "application/json", []byte(`{}`))
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, r.status)
				require.False(t, r.replayed(), "the middleware keeps the tenants apart")
			}
			_, effects := ds.stats()
			require.Equal(t, tc.effects, effects)
		})
	}
}

// redisKeyCounter returns a function that counts the keys of the Redis of
// args' --dsn.
func redisKeyCounter(ctx context.Context, t *testing.T, args []string) func() (int, error) {
	t.Helper()
	i := slices.Index(args, "--dsn")
	require.GreaterOrEqual(t, i, 0, "no --dsn in %q", args)
	opts, err := redis.ParseURL(args[i+1])
	require.NoError(t, err)
	rc := redis.NewClient(opts)
	t.Cleanup(func() { _ = rc.Close() })
	return func() (int, error) {
		n, err := rc.DBSize(ctx).Result()
		return int(n), err
	}
}
