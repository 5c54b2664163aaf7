package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// A Migration is one embedded schema step from a file NNN_description.up.sql.
type Migration struct {
	// Version is NNN, the number the file name starts with; positive.
	Version int
	// Name is the file name without ".up.sql", e.g. "001_create_intents".
	Name string
	// SQL is the file's content, run as one script.
	SQL string
}

// Load reads the files *.up.sql in dir of fsys (usually an embed.FS) and
// returns them as migrations ordered by version. Other files and
// directories are ignored. It fails on a name that does not start with a
// positive number and '_', on two files with the same version, and when dir
// holds no migration at all, so that a bad migration is caught by the first
// test rather than in production.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", dir, err)
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
			return nil, fmt.Errorf("migrate: %s/%s: name must start with a positive version number and '_'", dir, name)
		}
		if prev, dup := seen[version]; dup {
			return nil, fmt.Errorf("migrate: %s and %s in %s share version %d", prev, name, dir, version)
		}
		seen[version] = name
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s/%s: %w", dir, name, err)
		}
		out = append(out, Migration{Version: version, Name: strings.TrimSuffix(name, ".up.sql"), SQL: string(b)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("migrate: %s holds no *.up.sql migration", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
