package migrate_test

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemkit/idemkit/internal/migrate"
)

// FuzzLoad: no pair of file names makes Load panic, and what it loads is
// ordered by version, each version the number its file name starts with.
func FuzzLoad(f *testing.F) {
	for _, p := range [][2]string{
		{"001_a.up.sql", "002_b.up.sql"}, {"1_a.up.sql", "001_b.up.sql"}, {"a.up.sql", "001_b.up.sql"},
		{"010_x.up.sql", "9_y.up.sql"}, {"000_z.up.sql", "README.md"}, {"-1_n.up.sql", "+2_p.up.sql"},
		{"99999999999999999999_big.up.sql", "001_.up.sql"}, {"001_a.down.sql", "_.up.sql"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		fsys := fstest.MapFS{}
		for _, name := range []string{a, b} {
			if name == "" || strings.Contains(name, "/") || !fs.ValidPath("m/"+name) {
				return
			}
			fsys["m/"+name] = &fstest.MapFile{Data: []byte("SELECT 1")}
		}
		ms, err := migrate.Load(fsys, "m")
		if err != nil {
			return
		}
		for i, m := range ms {
			if m.Version <= 0 || (i > 0 && m.Version <= ms[i-1].Version) {
				t.Fatalf("Load(%q, %q): versions out of order: %+v", a, b, ms)
			}
			num, _, _ := strings.Cut(m.Name, "_")
			if v, err := strconv.Atoi(num); err != nil || v != m.Version {
				t.Fatalf("Load(%q, %q): %s has version %d", a, b, m.Name, m.Version)
			}
			if m.Name+".up.sql" != a && m.Name+".up.sql" != b {
				t.Fatalf("Load(%q, %q): name %q is not a file's", a, b, m.Name)
			}
		}
	})
}
