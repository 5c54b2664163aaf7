package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idemkit/internal/migrate"
)

type testBundle struct {
	db  *sql.DB
	now time.Time
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return &testBundle{db: db, now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (b *testBundle) target() migrate.Target {
	return migrate.SQLTarget(b.db, "test_migrations", func() time.Time { return b.now })
}

func load(t *testing.T, files map[string]string) []migrate.Migration {
	t.Helper()
	fsys := fstest.MapFS{}
	for name, sql := range files {
		fsys["m/"+name] = &fstest.MapFile{Data: []byte(sql)}
	}
	ms, err := migrate.Load(fsys, "m")
	require.NoError(t, err)
	return ms
}

var twoSteps = map[string]string{
	"001_create_t.up.sql":   `CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT NOT NULL) STRICT;`,
	"002_add_b.up.sql":      `ALTER TABLE t ADD COLUMN b TEXT; INSERT INTO t (a, b) VALUES ('x', 'y');`,
	"README.md":             `not a migration`,
	"003_later.down.sql":    `not an up migration`,
	"sub/009_nested.up.sql": `nested directories are not read`,
}

func versions(t *testing.T, db *sql.DB, table string) (vs []int, names []string) {
	t.Helper()
	rows, err := db.Query(`SELECT version, name, applied_at FROM ` + table + ` ORDER BY version`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var v int
		var name, at string
		require.NoError(t, rows.Scan(&v, &name, &at))
		require.Equal(t, "2026-12-01T09:00:00.000Z", at)
		vs, names = append(vs, v), append(names, name)
	}
	require.NoError(t, rows.Err())
	return vs, names
}

func TestLoad(t *testing.T) {
	t.Parallel()
	ms := load(t, twoSteps)
	require.Len(t, ms, 2)
	require.Equal(t, migrate.Migration{Version: 1, Name: "001_create_t", SQL: twoSteps["001_create_t.up.sql"]}, ms[0])
	require.Equal(t, 2, ms[1].Version)
	require.Equal(t, "002_add_b", ms[1].Name)
}

func TestLoad_Refuses(t *testing.T) {
	t.Parallel()
	tests := map[string]fstest.MapFS{
		"duplicate version": {
			"m/001_a.up.sql": {Data: []byte("SELECT 1")},
			"m/1_b.up.sql":   {Data: []byte("SELECT 2")},
		},
		"no number":       {"m/create.up.sql": {Data: []byte("SELECT 1")}},
		"no underscore":   {"m/001.up.sql": {Data: []byte("SELECT 1")}},
		"zero version":    {"m/000_zero.up.sql": {Data: []byte("SELECT 1")}},
		"negative":        {"m/-1_neg.up.sql": {Data: []byte("SELECT 1")}},
		"empty directory": {"m/README.md": {Data: []byte("x")}},
		"no directory":    {"other/001_a.up.sql": {Data: []byte("SELECT 1")}},
	}
	for name, fsys := range tests {
		ms, err := migrate.Load(fsys, "m")
		require.Error(t, err, "%s: got %v", name, ms)
	}
}

// TestRun_SQLite: on a real SQLite file, migrations apply in order and are
// recorded; a second run applies nothing; a later migration applies alone.
func TestRun_SQLite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ms := load(t, twoSteps)

	n, err := migrate.Run(ctx, b.target(), ms)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	var a, bcol string
	require.NoError(t, b.db.QueryRow(`SELECT a, b FROM t`).Scan(&a, &bcol), "002 ran after 001")
	require.Equal(t, "x", a)
	vs, names := versions(t, b.db, "test_migrations")
	require.Equal(t, []int{1, 2}, vs)
	require.Equal(t, []string{"001_create_t", "002_add_b"}, names)

	n, err = migrate.Run(ctx, b.target(), ms)
	require.NoError(t, err, "a second run is a no-op")
	require.Equal(t, 0, n)

	more := load(t, map[string]string{
		"001_create_t.up.sql": twoSteps["001_create_t.up.sql"],
		"002_add_b.up.sql":    twoSteps["002_add_b.up.sql"],
		"003_index.up.sql":    `CREATE INDEX t_a ON t (a);`,
	})
	n, err = migrate.Run(ctx, b.target(), more)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	vs, _ = versions(t, b.db, "test_migrations")
	require.Equal(t, []int{1, 2, 3}, vs)
	var rows int
	require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&rows))
	require.Equal(t, 1, rows, "002 did not run twice")
}

// TestRun_RefusesNewerSchema: a database migrated by a newer build is left
// alone.
func TestRun_RefusesNewerSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := migrate.Run(ctx, b.target(), load(t, map[string]string{
		"001_a.up.sql": `CREATE TABLE a (x INTEGER) STRICT;`,
		"002_b.up.sql": `CREATE TABLE b (x INTEGER) STRICT;`,
	}))
	require.NoError(t, err)

	n, err := migrate.Run(ctx, b.target(), load(t, map[string]string{
		"001_a.up.sql": `CREATE TABLE a (x INTEGER) STRICT;`,
	}))
	require.ErrorIs(t, err, migrate.ErrNewerSchema)
	var ne *migrate.NewerSchemaError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, migrate.NewerSchemaError{Current: 2, Known: 1}, *ne)
	require.Equal(t, 0, n)
	vs, _ := versions(t, b.db, "test_migrations")
	require.Equal(t, []int{1, 2}, vs)
}

// TestRun_FailureRollsBack: a failing migration leaves the database as it
// was before the run, the migrations before it in the same run included.
func TestRun_FailureRollsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := migrate.Run(ctx, b.target(), load(t, map[string]string{
		"001_a.up.sql": `CREATE TABLE a (x INTEGER) STRICT;`,
	}))
	require.NoError(t, err)

	n, err := migrate.Run(ctx, b.target(), load(t, map[string]string{
		"001_a.up.sql":      `CREATE TABLE a (x INTEGER) STRICT;`,
		"002_b.up.sql":      `CREATE TABLE b (x INTEGER) STRICT; INSERT INTO a VALUES (1);`,
		"003_broken.up.sql": `CREATE TABLE c (x INTEGER) STRICT; INSERT INTO no_such_table VALUES (1);`,
	}))
	require.Error(t, err)
	require.ErrorContains(t, err, "003_broken")
	require.Equal(t, 0, n)

	vs, _ := versions(t, b.db, "test_migrations")
	require.Equal(t, []int{1}, vs, "no version of the failed run is recorded")
	var tables int
	require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM sqlite_schema WHERE name IN ('b', 'c')`).Scan(&tables))
	require.Equal(t, 0, tables, "002 and 003 were rolled back")
	var rows int
	require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM a`).Scan(&rows))
	require.Equal(t, 0, rows)

	// The connection went back to the pool outside a transaction: the
	// database takes a write at once.
	_, err = b.db.ExecContext(ctx, `INSERT INTO a VALUES (2)`)
	require.NoError(t, err)
}

// TestRun_Concurrent: processes migrating one file at once take turns; the
// migrations are applied exactly once.
func TestRun_Concurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ms := load(t, twoSteps)
	const runners = 4
	applied := make([]int, runners)
	errs := make([]error, runners)
	var wg sync.WaitGroup
	for i := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = migrate.Run(context.Background(), b.target(), ms)
		}()
	}
	wg.Wait()
	total := 0
	for i := range runners {
		require.NoError(t, errs[i])
		total += applied[i]
	}
	require.Equal(t, 2, total)
	vs, _ := versions(t, b.db, "test_migrations")
	require.Equal(t, []int{1, 2}, vs)
}

// TestSQLTarget_TableWithoutName: the client's versions table predates the
// name column; it is written without it.
func TestSQLTarget_TableWithoutName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.db.ExecContext(ctx, `CREATE TABLE old_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT;
		CREATE TABLE a (x INTEGER) STRICT;
		INSERT INTO old_migrations VALUES (1, '2026-01-01T00:00:00.000Z');`)
	require.NoError(t, err)
	ms := load(t, map[string]string{
		"001_a.up.sql": `CREATE TABLE a (x INTEGER) STRICT;`,
		"002_b.up.sql": `CREATE TABLE b (x INTEGER) STRICT;`,
	})
	n, err := migrate.Run(ctx, migrate.SQLTarget(b.db, "old_migrations", nil), ms)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only 002 is above the recorded version")
	var v int
	require.NoError(t, b.db.QueryRow(`SELECT MAX(version) FROM old_migrations`).Scan(&v))
	require.Equal(t, 2, v)
}

func TestRun_RefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for name, ms := range map[string][]migrate.Migration{
		"none":         nil,
		"out of order": {{Version: 2, Name: "002_b"}, {Version: 1, Name: "001_a"}},
		"duplicate":    {{Version: 1, Name: "001_a"}, {Version: 1, Name: "001_b"}},
		"zero":         {{Version: 0, Name: "000_a"}},
	} {
		_, err := migrate.Run(ctx, b.target(), ms)
		require.Error(t, err, name)
	}
	_, err := migrate.Run(ctx, migrate.SQLTarget(b.db, "bad name; DROP TABLE x", nil), load(t, twoSteps))
	require.Error(t, err)
	var tables int
	require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM sqlite_schema`).Scan(&tables))
	require.Equal(t, 0, tables, "nothing was created")
}

// failingTarget records the calls of Run, to check what Run does with the
// errors of a Target.
type failingTarget struct {
	lockErr, applyErr, unlockErr error
	current                      int
	calls                        []string
	unlockedWith                 error
}

func (f *failingTarget) Lock(context.Context) (int, error) {
	f.calls = append(f.calls, "lock")
	return f.current, f.lockErr
}

func (f *failingTarget) Apply(_ context.Context, m migrate.Migration) error {
	f.calls = append(f.calls, m.Name)
	return f.applyErr
}

func (f *failingTarget) Unlock(_ context.Context, err error) error {
	f.calls = append(f.calls, "unlock")
	f.unlockedWith = err
	return f.unlockErr
}

func TestRun_TargetErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ms := []migrate.Migration{{Version: 1, Name: "001_a"}, {Version: 2, Name: "002_b"}}
	boom := errors.New("boom")

	lock := &failingTarget{lockErr: boom}
	_, err := migrate.Run(ctx, lock, ms)
	require.ErrorIs(t, err, boom)
	require.Equal(t, []string{"lock"}, lock.calls, "no Unlock after a failed Lock")

	apply := &failingTarget{applyErr: boom}
	n, err := migrate.Run(ctx, apply, ms)
	require.ErrorIs(t, err, boom)
	require.Equal(t, 0, n)
	require.Equal(t, []string{"lock", "001_a", "unlock"}, apply.calls)
	require.ErrorIs(t, apply.unlockedWith, boom, "Unlock is told to roll back")

	commit := &failingTarget{unlockErr: boom, current: 1}
	n, err = migrate.Run(ctx, commit, ms)
	require.ErrorIs(t, err, boom)
	require.Equal(t, 0, n)
	require.Equal(t, []string{"lock", "002_b", "unlock"}, commit.calls)
	require.NoError(t, commit.unlockedWith)
}
