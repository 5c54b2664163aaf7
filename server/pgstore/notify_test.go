package pgstore_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
	"github.com/idemkit/idemkit/server/storetest"
)

// Store has the method of server.ChangeSubscriber (docs: the waiting of
// server.Config.WaitInFlight), with its exact signature.
var _ interface {
	SubscribeChange(ctx context.Context, s server.Scope) (changed <-chan struct{}, stop func(), err error)
} = (*pgstore.Store)(nil)

// notifyBundle is two stores with NotifyChanges on one schema, each on a
// pool of its own: sub subscribes, writer changes records (another
// process, as far as PostgreSQL can tell).
type notifyBundle struct {
	ctx         context.Context
	dsn         string
	sub, writer *pgstore.Store
	writerPool  *pgxpool.Pool
}

func newPool(t *testing.T, ctx context.Context, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// setupNotify returns a notifyBundle on a fresh schema, migrated with cfg
// (NotifyChanges is set). The stores are closed when the test ends.
func setupNotify(t *testing.T, cfg pgstore.Config) *notifyBundle {
	t.Helper()
	b := &notifyBundle{ctx: storetest.Context(t), dsn: testpg.SchemaDSN(t)}
	cfg.NotifyChanges = true
	b.sub = newNotifyStore(t, b.ctx, newPool(t, b.ctx, b.dsn), cfg)
	b.writerPool = newPool(t, b.ctx, b.dsn)
	b.writer = newNotifyStore(t, b.ctx, b.writerPool, cfg)
	return b
}

func newNotifyStore(t *testing.T, ctx context.Context, pool *pgxpool.Pool, cfg pgstore.Config) *pgstore.Store {
	t.Helper()
	store, err := pgstore.New(pool, &cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	t.Cleanup(store.Close)
	return store
}

func scope(key string) server.Scope {
	return server.Scope{Principal: "p\u00e9\x1f" + strings.Repeat("x", 2000), Endpoint: "POST /payments", Key: key}
}

// claim acquires sc on store in lease mode and returns the token.
func claim(t *testing.T, ctx context.Context, store server.Store, sc server.Scope) int64 {
	t.Helper()
	now := time.Now()
	res, err := store.Claim(ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: now, LockedUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	return res.Token
}

var okResponse = &server.StoredResponse{Status: 201, Body: []byte(`{"id":1}`)}

// subscribe subscribes to sc on store; stop is called when the test ends.
func subscribe(t *testing.T, ctx context.Context, store *pgstore.Store, sc server.Scope) <-chan struct{} {
	t.Helper()
	changed, stop, err := store.SubscribeChange(ctx, sc)
	require.NoError(t, err)
	t.Cleanup(stop)
	return changed
}

// requireClosed waits, up to the test's context, for ch to be closed.
func requireClosed(t *testing.T, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s: not woken: %v", what, ctx.Err())
	}
}

// requireOpenAfter changes the record of a witness scope through writer,
// waits for the witness's notification (which PostgreSQL delivers after
// every notification committed before it), then requires ch still open.
func requireOpenAfter(t *testing.T, b *notifyBundle, ch <-chan struct{}, what string) {
	t.Helper()
	witness := scope("witness-" + t.Name())
	token := claim(t, b.ctx, b.writer, witness)
	woken := subscribe(t, b.ctx, b.sub, witness)
	require.NoError(t, b.writer.Release(b.ctx, witness, token))
	requireClosed(t, b.ctx, woken, "the witness")
	select {
	case <-ch:
		t.Fatalf("%s: woken", what)
	default:
	}
}

func forBothTables(t *testing.T, run func(t *testing.T, cfg pgstore.Config)) {
	for name, cfg := range map[string]pgstore.Config{"plain": {}, "partitioned": {Partitioned: true}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, cfg)
		})
	}
}

func TestSubscribeChange_CompleteFromAnotherConnectionWakes(t *testing.T) {
	t.Parallel()
	forBothTables(t, func(t *testing.T, cfg pgstore.Config) {
		b := setupNotify(t, cfg)
		sc := scope("k1")
		token := claim(t, b.ctx, b.writer, sc)
		changed := subscribe(t, b.ctx, b.sub, sc)
		require.NoError(t, b.writer.Complete(b.ctx, sc, token, time.Now(), okResponse))
		requireClosed(t, b.ctx, changed, "complete")
		rec, err := b.sub.Get(b.ctx, sc, time.Now())
		require.NoError(t, err)
		require.Equal(t, server.StateCompleted, rec.State, "visible to Get once woken")
	})
}

func TestSubscribeChange_ReleaseWakes(t *testing.T) {
	t.Parallel()
	forBothTables(t, func(t *testing.T, cfg pgstore.Config) {
		b := setupNotify(t, cfg)
		sc := scope("k1")
		token := claim(t, b.ctx, b.writer, sc)
		changed := subscribe(t, b.ctx, b.sub, sc)
		require.NoError(t, b.writer.Release(b.ctx, sc, token))
		requireClosed(t, b.ctx, changed, "release")
	})
}

// A completion that fails (lease lost) notifies nothing.
func TestSubscribeChange_LostCompletionDoesNotWake(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	sc := scope("k1")
	token := claim(t, b.ctx, b.writer, sc)
	changed := subscribe(t, b.ctx, b.sub, sc)
	require.ErrorIs(t, b.writer.Complete(b.ctx, sc, token+1, time.Now(), okResponse), server.ErrLeaseLost)
	require.ErrorIs(t, b.writer.Release(b.ctx, sc, token+1), server.ErrLeaseLost)
	requireOpenAfter(t, b, changed, "a completion that matched no row")
}

func TestSubscribeChange_TransactionalCompletionWakesOnCommitOnly(t *testing.T) {
	t.Parallel()
	forBothTables(t, func(t *testing.T, cfg pgstore.Config) {
		b := setupNotify(t, cfg)
		sc := scope("k1")
		tx, err := b.writer.BeginTx(b.ctx, storetest.LockTimeout)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		now := time.Now()
		res, err := tx.Claim(b.ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
			Now: now, LockedUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		changed := subscribe(t, b.ctx, b.sub, sc)
		require.NoError(t, tx.Complete(b.ctx, sc, res.Token, now, okResponse))
		requireOpenAfter(t, b, changed, "before COMMIT")
		require.NoError(t, tx.Commit(b.ctx))
		requireClosed(t, b.ctx, changed, "COMMIT")
	})
}

func TestSubscribeChange_TransactionalRollbackDoesNotWake(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})

	// The handler's transaction rolls back after the completion was queued.
	sc := scope("rolled-back")
	tx, err := b.writer.BeginTx(b.ctx, storetest.LockTimeout)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	now := time.Now()
	res, err := tx.Claim(b.ctx, server.ClaimRequest{Scope: sc, Fingerprint: []byte{1}, FingerprintVersion: 1,
		Now: now, LockedUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	changed := subscribe(t, b.ctx, b.sub, sc)
	require.NoError(t, tx.Complete(b.ctx, sc, res.Token, now, okResponse))
	require.NoError(t, tx.Rollback(b.ctx))

	// The COMMIT itself rolls back: the notification was issued in the
	// transaction, then its completion matched no row (a token it does not
	// hold) and aborted it.
	lost := scope("lost")
	token := claim(t, b.ctx, b.writer, lost)
	lostChanged := subscribe(t, b.ctx, b.sub, lost)
	tx2, err := b.writer.BeginTx(b.ctx, storetest.LockTimeout)
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(b.ctx) }()
	require.NoError(t, tx2.Complete(b.ctx, lost, token+1, time.Now(), okResponse))
	require.ErrorIs(t, tx2.Commit(b.ctx), server.ErrLeaseLost)

	requireOpenAfter(t, b, changed, "a rolled-back transaction")
	requireOpenAfter(t, b, lostChanged, "a COMMIT that rolled back")
}

func TestSubscribeChange_OtherScopeDoesNotWake(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	mine, other := scope("mine"), scope("other")
	claim(t, b.ctx, b.writer, mine)
	token := claim(t, b.ctx, b.writer, other)
	changed := subscribe(t, b.ctx, b.sub, mine)
	otherChanged := subscribe(t, b.ctx, b.sub, other)
	require.NoError(t, b.writer.Complete(b.ctx, other, token, time.Now(), okResponse))
	requireClosed(t, b.ctx, otherChanged, "the other scope")
	select {
	case <-changed:
		t.Fatal("woken by another scope's change")
	default:
	}
}

func TestSubscribeChange_TwoSchemasDoNotCrossTalk(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	ctx := b.ctx
	otherSchema := newNotifyStore(t, ctx, newPool(t, ctx, testpg.SchemaDSN(t)), pgstore.Config{NotifyChanges: true})
	sc := scope("same-scope")
	claim(t, ctx, b.writer, sc)
	token := claim(t, ctx, otherSchema, sc)
	changed := subscribe(t, ctx, b.sub, sc)
	otherChanged := subscribe(t, ctx, otherSchema, sc)
	require.NoError(t, otherSchema.Complete(ctx, sc, token, time.Now(), okResponse))
	requireClosed(t, ctx, otherChanged, "the other schema's subscriber")
	requireOpenAfter(t, b, changed, "the same scope in another schema")
}

// A store without NotifyChanges notifies nothing (and its SubscribeChange
// leaves the waiting to the caller's polling).
func TestSubscribeChange_WithoutNotifyChanges(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	quiet, err := pgstore.New(b.writerPool, nil)
	require.NoError(t, err)
	sc := scope("k1")
	token := claim(t, b.ctx, quiet, sc)
	changed := subscribe(t, b.ctx, b.sub, sc)
	require.NoError(t, quiet.Complete(b.ctx, sc, token, time.Now(), okResponse))
	requireOpenAfter(t, b, changed, "a completion by a store without NotifyChanges")

	never, stop, err := quiet.SubscribeChange(b.ctx, sc)
	require.NoError(t, err)
	defer stop()
	require.Nil(t, never, "a nil channel: this store does not notify, the caller polls")
	require.Zero(t, pgstore.ListenerPID(quiet), "no listener without NotifyChanges")
}

func TestSubscribeChange_ListenerKilledWakesAndReconnects(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	sc := scope("k1")
	changed := subscribe(t, b.ctx, b.sub, sc)
	pid := pgstore.ListenerPID(b.sub)
	require.NotZero(t, pid)
	var killed bool
	require.NoError(t, b.writerPool.QueryRow(b.ctx, `SELECT pg_terminate_backend($1)`, int32(pid)).Scan(&killed))
	require.True(t, killed)
	requireClosed(t, b.ctx, changed, "the listener's connection killed")

	// A later subscription waits for the reconnection and works again.
	token := claim(t, b.ctx, b.writer, sc)
	changed = subscribe(t, b.ctx, b.sub, sc)
	require.NotEqual(t, pid, pgstore.ListenerPID(b.sub), "a new connection")
	require.NoError(t, b.writer.Complete(b.ctx, sc, token, time.Now(), okResponse))
	requireClosed(t, b.ctx, changed, "complete after the reconnection")
}

func TestSubscribeChange_CloseWakesAndRefuses(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	sc := scope("k1")
	changed := subscribe(t, b.ctx, b.sub, sc)
	b.sub.Close()
	requireClosed(t, b.ctx, changed, "Close")
	_, _, err := b.sub.SubscribeChange(b.ctx, sc)
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	b.sub.Close() // idempotent

	_, _, err = b.writer.SubscribeChange(b.ctx, server.Scope{})
	require.Error(t, err, "an invalid scope")
}

// The notifying statements keep the store's contract.
func TestSubscribeChange_NotifyingStoreConformance(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) server.Store {
			ctx := storetest.Context(t)
			store := newNotifyStore(t, ctx, newPool(t, ctx, testpg.SchemaDSN(t)), pgstore.Config{NotifyChanges: true, SweepChunkSize: 3})
			return pgstore.WithCallerClock(store)
		})
	})
	t.Run("partitioned", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) server.Store {
			b := setupPartitioned(t, &pgstore.Config{SweepChunkSize: 3, PartitionSweepRows: true, NotifyChanges: true})
			historyPartition(t, b.ctx, b.pool)
			return b.store
		})
	})
}

// While the database cannot be reached the subscribers are woken and a
// subscription fails within its context (the caller polls instead); once
// it can, the listener reconnects and a subscription works again.
func TestSubscribeChange_UnreachableThenReconnects(t *testing.T) {
	t.Parallel()
	b := setupNotify(t, pgstore.Config{})
	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	proxy := tcpfault.Start(t, u.Host)
	u.Host = proxy.Addr()
	store := newNotifyStore(t, b.ctx, newPool(t, b.ctx, u.String()), pgstore.Config{NotifyChanges: true})
	sc := scope("k1")
	changed := subscribe(t, b.ctx, store, sc)

	proxy.Cut()
	requireClosed(t, b.ctx, changed, "the connection cut")
	ctx, cancel := context.WithTimeout(b.ctx, 300*time.Millisecond)
	_, _, err = store.SubscribeChange(ctx, sc)
	cancel()
	require.ErrorIs(t, err, server.ErrStoreUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	proxy.Restore()
	token := claim(t, b.ctx, b.writer, sc)
	changed = subscribe(t, b.ctx, store, sc)
	require.NoError(t, b.writer.Complete(b.ctx, sc, token, time.Now(), okResponse))
	requireClosed(t, b.ctx, changed, "complete after the reconnection")
}
