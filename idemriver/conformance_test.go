package idemriver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/intenttest"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testpg"
)

// The River backend passes the intent conformance suite (internal/intenttest)
// on PostgreSQL, as the SQLite client does.
func TestIntentConformance(t *testing.T) {
	t.Parallel()
	testpg.BaseDSN(t) // skips (fails under CI=true) without PostgreSQL
	intenttest.Run(t, riverBackend)
}

// TestIntentConformanceChild is the worker process of the suite's takeover
// case; in a normal run it does nothing.
func TestIntentConformanceChild(t *testing.T) {
	intenttest.Child(t, riverBackend)
}

var riverBackend = intenttest.Backend{
	Name: "river",
	Open: func(t *testing.T, o intenttest.Options) intenttest.Queue {
		dsn := testpg.SchemaDSN(t)
		ctx := testkit.CtxFor(t, ctxTimeout)
		pool, schema, err := openPool(ctx, dsn)
		require.NoError(t, err)
		require.NoError(t, idemriver.Migrate(ctx, pool, schema))
		pool.Close()
		q, err := openRiverQueue(ctx, dsn, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Close() })
		return q
	},
	Reopen:    openRiverQueue,
	ChildTest: "TestIntentConformanceChild",
}

type riverQueue struct {
	*testBundle
}

func openRiverQueue(ctx context.Context, dsn string, o intenttest.Options) (intenttest.Queue, error) {
	pool, schema, err := openPool(ctx, dsn)
	if err != nil {
		return nil, err
	}
	cfg := testConfig(&idemriver.Config{
		Window:             o.Window,
		SafetyMargin:       o.SafetyMargin,
		MaxAttemptsPerHour: o.MaxAttemptsPerHour,
		AttemptTimeout:     o.AttemptTimeout,
		LeaseDuration:      o.LeaseDuration,
		Backoff:            fixedBackoff(o.Backoff),
		SendHookFunc: func(_ string, r *http.Request) error {
			if o.Credential != "" {
				r.Header.Set("Authorization", "Bearer "+o.Credential)
			}
			return nil
		},
	}, schema)
	c, err := idemriver.NewClient(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &riverQueue{&testBundle{dsn: dsn, schema: schema, pool: pool, client: c}}, nil
}

func (q *riverQueue) Submit(ctx context.Context, r *intenttest.Request) (*intenttest.Intent, error) {
	in, err := q.client.Submit(ctx, &idemriver.Request{Method: r.Method, URL: r.URL, Header: r.Header, Body: r.Body})
	if err != nil {
		return nil, err
	}
	return suiteIntent(in), nil
}

func (q *riverQueue) Work(ctx context.Context) error {
	if err := q.client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return q.client.Stop(sctx)
}

func (q *riverQueue) Get(ctx context.Context, id string) (*intenttest.Intent, error) {
	in, err := q.client.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return suiteIntent(in), nil
}

func (q *riverQueue) Wait(ctx context.Context, id string) (*intenttest.Intent, error) {
	in, err := q.client.Wait(ctx, id)
	if in == nil {
		return nil, err
	}
	return suiteIntent(in), nil
}

// Stored returns every row of the schema's River jobs and of the package's
// host table, as JSON text.
func (q *riverQueue) Stored(ctx context.Context) ([]byte, error) {
	var s string
	err := q.pool.QueryRow(ctx, `SELECT
		coalesce((SELECT string_agg(to_jsonb(j)::text, E'\n') FROM river_job j), '') || E'\n' ||
		coalesce((SELECT string_agg(to_jsonb(h)::text, E'\n') FROM idemriver_host h), '')`).Scan(&s)
	return []byte(s), err
}

func (q *riverQueue) Location() string { return q.dsn }

func (q *riverQueue) Close() error {
	q.pool.Close()
	return nil
}

func suiteIntent(in *idemriver.Intent) *intenttest.Intent {
	out := &intenttest.Intent{
		ID: in.ID, Key: in.Key, State: intenttest.State(in.State),
		Attempts: in.Attempts, FirstAttemptAt: in.FirstAttemptAt, Horizon: in.Horizon, LastError: in.LastError,
	}
	if o := in.Outcome; o != nil {
		out.Status, out.Replayed, out.Header, out.Body = o.Status, o.Replayed, o.Header, o.Body
	}
	return out
}
