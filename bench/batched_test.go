package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testpg"
	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/pgstore"
)

// roundTrips counts what a pgx connection sends and waits for: each Exec,
// Query or transaction statement and each batch is one round trip (with a
// warm statement cache); a prepare is counted apart.
type roundTrips struct{ queries, batches, prepares atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (c *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *roundTrips) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func (c *roundTrips) reset() { c.queries.Store(0); c.batches.Store(0); c.prepares.Store(0) }
func (c *roundTrips) total() int64 {
	return c.queries.Load() + c.batches.Load() + c.prepares.Load()
}

// Each route costs the round trips the harness's description says, on a
// warm connection (one pool connection, statements already cached): the
// batched baseline three per new key and two per replay, the naive
// reference five and four, and idemkit no more than the batched baseline —
// transactional mode three and two, lease mode three and one.
func TestRoundTrips_PerNewKeyAndReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	trips := &roundTrips{}
	pcfg, err := pgxpool.ParseConfig(testpg.SchemaDSN(t))
	require.NoError(t, err)
	pcfg.MaxConns = 1
	pcfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, benchSchemaSQL)
	require.NoError(t, err)
	store, err := pgstore.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	modes, err := defaultModes(&pgEnv{pool: pool, store: store})
	require.NoError(t, err)
	handler := func(name string) http.Handler {
		i := slices.IndexFunc(modes, func(m serverMode) bool { return m.name == name })
		require.GreaterOrEqual(t, i, 0, name)
		return modes[i].handler
	}

	post := func(h http.Handler, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(requestBody))
		req.Header.Set(server.HeaderKey, key)
		req.Header.Set(headerAcct, "acct_1")
		req.Header.Set(headerCell, "1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	tests := []struct {
		name                string
		handler             http.Handler
		newKey, replayTrips int64
	}{
		{name: baselineMode, handler: handler(baselineMode), newKey: 3, replayTrips: 2},
		{name: naiveMode, handler: handler(naiveMode), newKey: 5, replayTrips: 4},
		{name: "transactional", handler: handler("transactional"), newKey: 3, replayTrips: 2},
		{name: "lease", handler: handler("lease"), newKey: 3, replayTrips: 1},
	}
	for _, tt := range tests {
		// Warm the connection's statement cache with one key and its replay.
		warm := uuid.NewString()
		require.Equal(t, http.StatusCreated, post(tt.handler, warm).Code)
		require.Equal(t, http.StatusCreated, post(tt.handler, warm).Code)

		key := uuid.NewString()
		trips.reset()
		first := post(tt.handler, key)
		require.Equal(t, http.StatusCreated, first.Code, "%s: %s", tt.name, first.Body)
		require.Empty(t, first.Header().Get(wire.HeaderReplayed))
		require.Equal(t, tt.newKey, trips.total(), "%s: round trips of a new key", tt.name)

		trips.reset()
		again := post(tt.handler, key)
		require.Equal(t, http.StatusCreated, again.Code, "%s: %s", tt.name, again.Body)
		require.Equal(t, "true", again.Header().Get(wire.HeaderReplayed))
		require.Equal(t, first.Body.String(), again.Body.String())
		require.Equal(t, tt.replayTrips, trips.total(), "%s: round trips of a replay", tt.name)
		require.Zero(t, trips.prepares.Load(), "%s: the statement cache was warm", tt.name)
	}
	var open int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM batched_keys WHERE status IS NULL").Scan(&open))
	require.Zero(t, open, "every batched claim was completed")
}
