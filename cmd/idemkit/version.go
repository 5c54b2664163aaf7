package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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

// queueSchemaVersion is the queue schema version this binary writes: that
// of a fresh queue, made in a temporary directory and removed.
func queueSchemaVersion() string {
	dir, err := os.MkdirTemp("", "idemkit-version-")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	c, err := idemkit.Open(ctx, filepath.Join(dir, "queue.db"), &idemkit.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	defer c.Close()
	v, err := c.SchemaVersion(ctx)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return fmt.Sprint(v)
}
