package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing/fstest"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idemkit/internal/migrate"
)

func ExampleRun() {
	// In a package: //go:embed migrations/*.sql, then migrate.Load(fsys, "migrations").
	fsys := fstest.MapFS{
		"migrations/001_create_notes.up.sql":  {Data: []byte(`CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT;`)},
		"migrations/002_notes_created.up.sql": {Data: []byte(`ALTER TABLE notes ADD COLUMN created_at TEXT;`)},
	}
	ms, err := migrate.Load(fsys, "migrations")
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "migrate-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "notes.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()

	ctx := context.Background()
	for range 2 {
		n, err := migrate.Run(ctx, migrate.SQLTarget(db, "notes_migrations", nil), ms)
		fmt.Println(n, err)
	}
	// Output:
	// 2 <nil>
	// 0 <nil>
}
