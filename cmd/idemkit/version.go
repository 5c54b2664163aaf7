package main

import (
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

// queueSchemaVersion is the queue schema version this binary writes.
func queueSchemaVersion() string { return fmt.Sprint(idemkit.QueueSchemaVersion) }
