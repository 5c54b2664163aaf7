package main

import (
	"context"
	"database/sql"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

func init() {
	cobra.AddTemplateFunc("queueSchema", queueSchemaVersion)
}

// versionTemplate is what --version prints: the module version and the
// schema version of the queues this binary writes.
const versionTemplate = "{{.Version}}\nqueue schema: {{queueSchema}}\n"

// versionString is the module version (a tag for `go install ...@vX`,
// "(devel)" for a local build) with the VCS revision when the build
// recorded one.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "idemkit (unknown version)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var extra []string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			extra = append(extra, "rev "+s.Value[:min(12, len(s.Value))])
		case "vcs.modified":
			if s.Value == "true" {
				extra = append(extra, "modified")
			}
		}
	}
	extra = append(extra, bi.GoVersion)
	return fmt.Sprintf("idemkit %s (%s)", v, strings.Join(extra, ", "))
}

// queueSchemaVersion is the highest queue migration this binary applies,
// read from an in-memory queue it migrates (the SDK does not export it).
func queueSchemaVersion() string {
	ctx := context.Background()
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection: one in-memory database
	c, err := idemkit.NewClient(ctx, db, nil)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer c.Close()
	var v int
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM idemkit_client_migrations`).Scan(&v); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fmt.Sprint(v)
}
