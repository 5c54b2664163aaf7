package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one embedded schema step, from a file NNN_description.up.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads the migrations in dir of fsys (a driver package's
// embedded files), ordered by version. It fails on a malformed file name or a duplicate
// version, so a bad migration is caught by the first test, not in production.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("idemkit/server: read migrations %s: %w", dir, err)
	}
	var out []Migration
	seen := make(map[int]string)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".up.sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("idemkit/server: migration %s/%s: name must start with a positive version number and '_'", dir, name)
		}
		if prev, dup := seen[version]; dup {
			return nil, fmt.Errorf("idemkit/server: migrations %s and %s share version %d", prev, name, version)
		}
		seen[version] = name
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("idemkit/server: read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: version, Name: strings.TrimSuffix(name, ".up.sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// MigrationTarget is one database as the migration runner sees it; the
// driver implements the locking (PostgreSQL: an advisory lock, SQLite:
// BEGIN IMMEDIATE) and the versions table idempotency_migrations.
type MigrationTarget interface {
	// Lock begins the exclusive migration step and returns the versions
	// already applied, creating the versions table if needed.
	Lock(ctx context.Context) (applied map[int]bool, err error)
	// Apply runs m.SQL and records m.
	Apply(ctx context.Context, m Migration) error
	// Unlock ends the step: commit if err is nil, roll back otherwise.
	Unlock(ctx context.Context, err error) error
}

// Migrate applies, in order and in one step of t, every migration of ms that
// t has not applied yet.
func Migrate(ctx context.Context, t MigrationTarget, ms []Migration) (err error) {
	applied, err := t.Lock(ctx)
	if err != nil {
		return errors.Join(err, t.Unlock(ctx, err))
	}
	defer func() { err = errors.Join(err, t.Unlock(ctx, err)) }()
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if err := t.Apply(ctx, m); err != nil {
			return err
		}
	}
	return nil
}
