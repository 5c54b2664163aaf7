package pgstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
)

// A claim that meets a completed record only reads it: inside a transaction
// it leaves no transaction id assigned (it wrote nothing, not even a row
// lock), so in lease mode a replay commits nothing and waits for no flush.
func TestPostgresClaim_ReplayOfCompletedRecordWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := migratedPostgresStore(t)
	pool := store.Pool()

	now := time.Now()
	req := payClaim("replayed", []byte("fp"), now, time.Minute, time.Hour)
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.NoError(t, store.Complete(ctx, req.Scope, res.Token, now, &server.StoredResponse{Status: 201, Body: []byte("ok")}))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	again, err := store.s.Claim(ctx, &querier{q: tx}, req)
	require.NoError(t, err)
	require.False(t, again.Acquired)
	require.NotNil(t, again.Existing)
	require.Equal(t, server.StateCompleted, again.Existing.State)
	require.Equal(t, []byte("ok"), again.Existing.Response.Body)

	var xid *string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid))
	require.Nil(t, xid, "the replay's claim wrote (or locked) a row")
}

// The completion of a claim rewrites only columns no index covers, so
// PostgreSQL updates the row in place on its page (a HOT update) instead of
// writing a new entry in every index.
func TestPostgresComplete_IsHeapOnlyUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := migratedPostgresStore(t)

	// One transaction, so that its own statistics count exactly these rows.
	tx, err := store.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	const n = 100
	body := []byte(`{"id":"pay_0123456789abcdef","amount":1000,"currency":"EUR","status":"succeeded"}`)
	for i := range n {
		now := time.Now()
		req := payClaim(fmt.Sprintf("key-%03d", i), make([]byte, 32), now, time.Minute, 24*time.Hour)
		res, err := store.s.Claim(ctx, &querier{q: tx}, req)
		require.NoError(t, err)
		require.True(t, res.Acquired)
		resp := &server.StoredResponse{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
		require.NoError(t, store.s.Complete(ctx, &querier{q: tx}, req.Scope, res.Token, now, resp))
	}
	var updates, hot int
	require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
		WHERE schemaname = current_schema() AND relname = 'idempotency_keys'`).Scan(&updates, &hot))
	require.Equal(t, n, updates)
	t.Logf("%d of %d completions HOT", hot, updates)
	require.GreaterOrEqual(t, hot, n*9/10, "HOT completions")
}

// migratedPostgresStore is a store on the database's clock over a fresh
// schema.
func migratedPostgresStore(t *testing.T) *Store {
	t.Helper()
	store, err := New(testpg.Pool(t), nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	return store
}

// Commit sends the completion and the COMMIT in one round trip. A
// completion that matches no claim (here: the record expired while the
// handler ran) must abort the transaction before the COMMIT reaches it, so
// the effect is rolled back with it, and Commit reports server.ErrLeaseLost.
func TestPostgresTx_CompletionMatchingNoClaimRollsBackTheEffect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := WithCallerClock(migratedPostgresStore(t))
	_, err := store.Pool().Exec(ctx, "CREATE TABLE effects (id bigserial PRIMARY KEY)")
	require.NoError(t, err)

	now := time.Now()
	req := payClaim("expires-in-flight", []byte("fp"), now, time.Second, time.Minute)
	tx, err := store.BeginTx(ctx, 0)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := tx.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	_, err = tx.Handle().(pgx.Tx).Exec(ctx, "INSERT INTO effects DEFAULT VALUES")
	require.NoError(t, err)
	require.NoError(t, tx.Complete(ctx, req.Scope, res.Token, now.Add(2*time.Minute), &server.StoredResponse{Status: 201}))
	require.ErrorIs(t, tx.Commit(ctx), server.ErrLeaseLost)

	var effects int
	require.NoError(t, store.Pool().QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&effects))
	require.Zero(t, effects, "the effect committed without its stored response")
	_, err = store.Get(ctx, req.Scope, now)
	require.ErrorIs(t, err, server.ErrRecordNotFound, "the claim rolled back too")
}

// Commit sends its COMMIT past the handler's pgx.Tx and gives the connection
// back to the pool: from then on the pgx.Tx refuses every statement instead
// of running it outside the transaction, on a connection another request
// may hold.
func TestPostgresTx_HandleIsClosedOnceCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := migratedPostgresStore(t)
	now := time.Now()
	req := payClaim("closed-handle", []byte("fp"), now, time.Second, time.Minute)
	tx, err := store.BeginTx(ctx, 0)
	require.NoError(t, err)
	res, err := tx.Claim(ctx, req)
	require.NoError(t, err)
	require.NoError(t, tx.Complete(ctx, req.Scope, res.Token, now, &server.StoredResponse{Status: 201}))
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, tx.Rollback(ctx), "Rollback after Commit is a no-op")

	h := tx.Handle().(pgx.Tx)
	_, err = h.Exec(ctx, "SELECT 1")
	require.ErrorIs(t, err, pgx.ErrTxClosed)
	var one int
	require.ErrorIs(t, h.QueryRow(ctx, "SELECT 1").Scan(&one), pgx.ErrTxClosed)
	require.ErrorIs(t, h.SendBatch(ctx, &pgx.Batch{}).Close(), pgx.ErrTxClosed)
	require.ErrorIs(t, h.Commit(ctx), pgx.ErrTxClosed)
	require.Nil(t, h.Conn())

	rec, err := store.Get(ctx, req.Scope, now)
	require.NoError(t, err)
	require.Equal(t, server.StateCompleted, rec.State)
}

// payClaim is the claim of key on POST /pay for principal p at now.
func payClaim(key string, fp []byte, now time.Time, lease, window time.Duration) server.ClaimRequest {
	return server.ClaimRequest{
		Scope:              server.Scope{Principal: "p", Endpoint: "POST /pay", Key: key},
		Fingerprint:        fp,
		FingerprintVersion: 1,
		Now:                now,
		LockedUntil:        now.Add(lease),
		ExpiresAt:          now.Add(window),
	}
}

// pgRoundTrips counts what a pool sends: one per query outside a batch, one
// per batch.
type pgRoundTrips struct{ n atomic.Int64 }

func (c *pgRoundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*pgRoundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *pgRoundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (*pgRoundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*pgRoundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A transactional-mode new key costs the store two round trips on one
// connection, as the batched hand-written POST's does (the handler's effect
// is the third): BEGIN, its timeouts and the claim; the completion and the
// COMMIT. Nothing is read before the claim.
func TestPostgresTx_NewKeyCostsTwoRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, trips := tracedPostgresStore(t)

	newKey := func(key string) int64 {
		before := trips.n.Load()
		tx, err := store.BeginTx(ctx, 0)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		req := payClaim(key, []byte("fp"), time.Now(), time.Second, time.Minute)
		res, err := tx.Claim(ctx, req)
		require.NoError(t, err)
		require.True(t, res.Acquired)
		require.NoError(t, tx.Complete(ctx, req.Scope, res.Token, req.Now, &server.StoredResponse{Status: 201}))
		require.NoError(t, tx.Commit(ctx))
		return trips.n.Load() - before
	}
	newKey("warm-up")
	require.EqualValues(t, 2, newKey("counted"))
}

// A transactional-mode replay costs two round trips, as the batched
// hand-written POST's does: the claim that begins the transaction and reads
// the completed record, and the ROLLBACK.
func TestPostgresTx_ReplayCostsTwoRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, trips := tracedPostgresStore(t)
	require.True(t, store.TxClaimAnswersReplays())
	req := payClaim("replayed", []byte("fp"), time.Now(), time.Minute, time.Hour)
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.NoError(t, store.Complete(ctx, req.Scope, res.Token, req.Now, &server.StoredResponse{Status: 201, Body: []byte("ok")}))

	before := trips.n.Load()
	tx, err := store.BeginTx(ctx, 0)
	require.NoError(t, err)
	again, err := tx.Claim(ctx, req)
	require.NoError(t, err)
	require.False(t, again.Acquired)
	require.NotNil(t, again.Existing)
	require.Equal(t, []byte("ok"), again.Existing.Response.Body)
	require.NoError(t, tx.Rollback(ctx))
	require.EqualValues(t, 2, trips.n.Load()-before)
}

// A lease-mode replay costs one round trip: the claim statement reads the
// completed record.
func TestPostgresClaim_ReplayCostsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, trips := tracedPostgresStore(t)
	req := payClaim("replayed", []byte("fp"), time.Now(), time.Minute, time.Hour)
	res, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.NoError(t, store.Complete(ctx, req.Scope, res.Token, req.Now, &server.StoredResponse{Status: 201}))

	before := trips.n.Load()
	again, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.NotNil(t, again.Existing)
	require.EqualValues(t, 1, trips.n.Load()-before)
}

// tracedPostgresStore is a migrated store on a pool of one connection
// (whose statement cache the first statements warm) that counts its round
// trips.
func tracedPostgresStore(t *testing.T) (*Store, *pgRoundTrips) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testpg.SchemaDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 1
	trips := &pgRoundTrips{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	return store, trips
}

// The completion of a claim the transaction holds, far from the end of its
// window, is a plain UPDATE sent with the COMMIT. The row lock makes it
// match; a handler that changed the row on the transaction breaks that, and
// then the COMMIT behind it has committed the effect without a stored
// response: Commit must not report that as "nothing was applied".
func TestPostgresTx_HeldCompletionThatMatchesNothingIsNotReportedAsRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, tx, req, res, now := heldClaim(t, "tampered")
	_, err := tx.Handle().(pgx.Tx).Exec(ctx, "DELETE FROM idempotency_keys WHERE key = $1", req.Scope.Key)
	require.NoError(t, err)
	require.NoError(t, tx.Complete(ctx, req.Scope, res.Token, now, &server.StoredResponse{Status: 201}))
	err = tx.Commit(ctx)
	require.ErrorIs(t, err, server.ErrOutcomeUnknown)
	require.ErrorIs(t, err, errHeldCompletionMissed)
}

// A held completion far from the end of its window stores the response
// like the guarded one.
func TestPostgresTx_HeldCompletionStoresTheResponse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, tx, req, res, now := heldClaim(t, "held")
	require.NoError(t, tx.Complete(ctx, req.Scope, res.Token, now, &server.StoredResponse{Status: 201, Body: []byte("ok")}))
	require.Equal(t, pgCompleteHeld, tx.(*pgTx).completeSQL)
	require.NoError(t, tx.Commit(ctx))
	rec, err := store.Get(ctx, req.Scope, now)
	require.NoError(t, err)
	require.Equal(t, server.StateCompleted, rec.State)
	require.Equal(t, []byte("ok"), rec.Response.Body)
}

// heldClaim is a transaction that acquired key with an hour of its window
// left, rolled back when the test ends.
func heldClaim(t *testing.T, key string) (*Store, server.StoreTx, server.ClaimRequest, server.ClaimResult, time.Time) {
	t.Helper()
	ctx := context.Background()
	store := migratedPostgresStore(t)
	now := time.Now()
	req := payClaim(key, []byte("fp"), now, time.Second, time.Hour)
	tx, err := store.BeginTx(ctx, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	res, err := tx.Claim(ctx, req)
	require.NoError(t, err)
	require.True(t, res.Acquired)
	return store, tx, req, res, now
}

// A transactional-mode request takes one connection from the pool, new key
// or replay: the read that answers a replay runs on the connection the
// transaction will use, not on one of its own.
func TestTransactionalMiddleware_TakesOneConnectionPerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testpg.SchemaDSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	var acquired atomic.Int64
	cfg.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) {
		acquired.Add(1)
		return true, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = pool.Exec(ctx, "CREATE TABLE effects (key text PRIMARY KEY)")
	require.NoError(t, err)

	mw, err := server.New(store, &server.Config{Mode: server.ModeTransactional,
		PrincipalFunc: func(*http.Request) (string, error) { return "acct", nil }})
	require.NoError(t, err)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := Tx(r.Context())
		require.True(t, ok)
		if _, err := tx.Exec(r.Context(), "INSERT INTO effects VALUES ($1)", r.Header.Get(server.HeaderKey)); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	send := func() (*httptest.ResponseRecorder, int64) {
		before := acquired.Load()
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(server.HeaderKey, "0b9c3c4e-6f3e-4a8e-9d57-3f1d2c7a9e10")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec, acquired.Load() - before
	}
	first, n := send()
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	require.EqualValues(t, 1, n, "connections taken by a new key")
	again, n := send()
	require.Equal(t, http.StatusCreated, again.Code)
	require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, n, "connections taken by a replay")
}
