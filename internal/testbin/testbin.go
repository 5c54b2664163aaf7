// Package testbin builds the project's commands for tests that run them as
// a user would: as a separate process.
package testbin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// GoTool returns the go command that runs the tests: the one on PATH, else
// the one in $GOROOT/bin.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "go"
}

// Build compiles the package at pkg (an import path or a directory, as the
// go command takes it) into dir/name and returns the binary's path. It fails
// the test if the build fails or takes more than three minutes.
func Build(tb testing.TB, pkg, dir, name string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, GoTool(), "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
