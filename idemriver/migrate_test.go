package idemriver_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/idemriver"
	"github.com/idemkit/idemkit/internal/testkit"
	"github.com/idemkit/idemkit/internal/testpg"
)

// TestMigrate_ProcessesStartingTogether: services started at once (the
// outbox README starts the order endpoint and its workers together) all
// migrate the same fresh schema at the same moment, each through a pool
// of its own. Every one must succeed: the migrations are serialized, never
// "relation river_migration already exists".
func TestMigrate_ProcessesStartingTogether(t *testing.T) {
	t.Parallel()
	dsn := testpg.SchemaDSN(t)
	ctx := testkit.CtxFor(t, ctxTimeout)
	const n = 4
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		pool, schema, err := openPool(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = idemriver.Migrate(ctx, pool, schema)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "service %d", i)
	}
}
