package paymentsapi

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/migrate"
)

// execSQL runs q on the ledger's database directly.
func execSQL(t *testing.T, l ledger, q string) {
	t.Helper()
	var err error
	switch d := l.d.(type) {
	case pgDialect:
		_, err = d.pool.Exec(t.Context(), q)
	case sqliteDialect:
		_, err = d.db.ExecContext(t.Context(), q)
	case myDialect:
		_, err = d.db.ExecContext(t.Context(), q)
	default:
		t.Fatalf("unknown dialect %T", l.d)
	}
	require.NoError(t, err)
}

// runMigrations applies ms with the ledger's target and returns how many
// it applied.
func runMigrations(t *testing.T, l ledger, ms []migrate.Migration) (int, error) {
	t.Helper()
	_, target := l.d.migrations()
	return migrate.Run(t.Context(), target, ms)
}

func loadMigrations(t *testing.T, l ledger) []migrate.Migration {
	t.Helper()
	dir, _ := l.d.migrations()
	ms, err := migrate.Load(migrationFS, dir)
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	return ms
}

// TestLedger_Migrate: the payments migrations are recorded, a second Open
// applies nothing, and a database migrated by a newer build is refused.
func TestLedger_Migrate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		l := b.app.handlers.ledger
		ms := loadMigrations(t, l)

		n, err := runMigrations(t, l, ms)
		require.NoError(t, err)
		require.Equal(t, 0, n, "Open applied and recorded every migration")

		again, err := Open(t.Context(), cfg)
		require.NoError(t, err, "a second Open on a migrated database")
		again.Close()

		future := append(append([]migrate.Migration(nil), ms...),
			migrate.Migration{Version: ms[len(ms)-1].Version + 1, Name: "999_future", SQL: "CREATE TABLE payments_future (x integer)"})
		n, err = runMigrations(t, l, future)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = Open(t.Context(), cfg)
		require.ErrorIs(t, err, migrate.ErrNewerSchema)
	})
}

// TestLedger_MigrateBeforeVersionsTable: a database made when the payments
// schema ran at every start (no payments_migrations) keeps its payments and
// gets the versions table.
func TestLedger_MigrateBeforeVersionsTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		require.Equal(t, 201, b.pay(t, "alice", "k1", usd40).status)
		l := b.app.handlers.ledger
		execSQL(t, l, "DROP TABLE "+migrationsTable)

		require.NoError(t, l.migrate(t.Context()))
		n, err := runMigrations(t, l, loadMigrations(t, l))
		require.NoError(t, err)
		require.Equal(t, 0, n, "the versions table was made again")
		ps, err := b.app.Payments(t.Context(), "alice")
		require.NoError(t, err)
		require.Len(t, ps, 1)
	})
}

// TestLedger_CreateOutsideRequestTx: in lease mode the ledger writes on the
// database; the same payment twice is one row, a different one with the
// same key is errKeyReused, and the stored time comes back at millisecond
// precision in UTC.
func TestLedger_CreateOutsideRequestTx(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		b := setup(t, cfg, nil)
		l := b.app.handlers.ledger
		ctx := context.Background()
		at := time.Date(2026, 12, 1, 10, 5, 7, 123_000_000, time.FixedZone("CET", 3600))
		p := Payment{ID: "pay_1", Account: "alice", Amount: 4000, Currency: "USD", Description: "groceries", CreatedAt: at}

		got, err := l.create(ctx, p, "k1")
		require.NoError(t, err)
		require.True(t, at.Equal(got.CreatedAt), "got %v want %v", got.CreatedAt, at)
		require.Equal(t, time.UTC, got.CreatedAt.Location())

		same := p
		same.ID = "pay_2"
		again, err := l.create(ctx, same, "k1")
		require.NoError(t, err)
		require.Equal(t, got, again, "the first payment, not a second one")

		other := p
		other.Amount = 1
		_, err = l.create(ctx, other, "k1")
		require.ErrorIs(t, err, errKeyReused)

		ps, err := l.list(ctx, "alice")
		require.NoError(t, err)
		require.Equal(t, []Payment{got}, ps)
	})
}

// TestOpen_ConcurrentOnFreshDatabase: servers starting at once on a new
// database take turns migrating it; each comes up.
func TestOpen_ConcurrentOnFreshDatabase(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		const servers = 3
		errs := make(chan error, servers)
		for range servers {
			go func() {
				c := *cfg
				a, err := Open(t.Context(), &c)
				if err == nil {
					a.Close()
				}
				errs <- err
			}()
		}
		for range servers {
			require.NoError(t, <-errs)
		}
		b := setup(t, cfg, nil)
		n, err := runMigrations(t, b.app.handlers.ledger, loadMigrations(t, b.app.handlers.ledger))
		require.NoError(t, err)
		require.Equal(t, 0, n)
	})
}
