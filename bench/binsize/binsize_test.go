// Package binsize checks what a PostgreSQL-only API pays, in binary size and
// linked packages, for using idemkit's server: ./idemkit (server +
// server/pgstore, transactional mode) against ./baseline (the same API with
// a hand-written idempotency table on pgx + net/http alone). Issue 11's
// target is at most 1.2× the baseline's size, with no SQLite, Prometheus or
// protobuf linked.
//
//	go test ./bench/binsize -run TestBinarySize -v
package binsize

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxRatio is the largest idemkit/baseline size ratio accepted.
const maxRatio = 1.2

func TestBinarySize_PostgresOnlyAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries; run without -short")
	}
	dir := t.TempDir()
	size := func(pkg string) int64 {
		out := filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, b)
		fi, err := os.Stat(out)
		require.NoError(t, err)
		return fi.Size()
	}
	base, idem := size("./baseline"), size("./idemkit")
	ratio := float64(idem) / float64(base)
	t.Logf("PostgreSQL-only API: idemkit %.1f MB, pgx + net/http alone %.1f MB, ratio %.2f×", mb(idem), mb(base), ratio)
	require.LessOrEqual(t, ratio, maxRatio, "idemkit's PostgreSQL-only API is %.2f× the baseline's size", ratio)
}

func TestBinarySize_PostgresOnlyLinksNoSQLiteNorPrometheus(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "./idemkit").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/jackc/pgx/v5")
	for _, dep := range deps {
		for _, banned := range []string{"modernc.org/sqlite", "github.com/prometheus/", "google.golang.org/protobuf"} {
			require.False(t, strings.HasPrefix(dep, banned), "a PostgreSQL-only API links %s", dep)
		}
	}
}

func TestBinarySize_SQLiteStoreLinksNoPgxNorPrometheus(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/idemkit/idemkit/server/sqlitestore").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "modernc.org/sqlite")
	for _, dep := range deps {
		for _, banned := range []string{"github.com/jackc/", "github.com/prometheus/"} {
			require.False(t, strings.HasPrefix(dep, banned), "the SQLite store links %s", dep)
		}
	}
}

func mb(n int64) float64 { return float64(n) / 1e6 }
