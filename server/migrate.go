package server

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// migrationFS holds the versioned schema of each store. A file is named
// NNN_description.up.sql; NNN is its version. Versions are applied in order
// and recorded in the table idempotency_migrations.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFS embed.FS

// migration is one embedded schema step.
type migration struct {
	Version int
	Name    string
	SQL     string
}

// loadMigrations reads the migrations of one store ("postgres" or "sqlite"),
// ordered by version. It fails on a malformed file name or a duplicate
// version, so a bad migration is caught by the first test, not in production.
func loadMigrations(dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("idemkit/server: read migrations %s: %w", dir, err)
	}
	var out []migration
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
		b, err := fs.ReadFile(migrationFS, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("idemkit/server: read migration %s: %w", name, err)
		}
		out = append(out, migration{Version: version, Name: strings.TrimSuffix(name, ".up.sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
