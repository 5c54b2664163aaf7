package chaos

import (
	"github.com/idemkit/idemkit/internal/testbin"
	"github.com/idemkit/idemkit/internal/testdb"

	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// roleEnv names the child role the re-executed test binary plays; specEnv
// holds its JSON spec.
const (
	roleEnv = "IDEMKIT_CHAOS_ROLE"
	specEnv = "IDEMKIT_CHAOS_SPEC"
)

// binDir holds the binaries built once per test run (see binaries).
var binDir string

// TestMain runs the tests under goleak, or a child role when the test
// binary was re-executed by a test.
func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(childMain(role, os.Getenv(specEnv)))
	}
	dir, err := os.MkdirTemp("", "idemkit-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	binDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		return runLeakChecked(m)
	}()
	os.Exit(code)
}

// runLeakChecked is goleak.VerifyTestMain without its os.Exit, so that the
// binaries directory is removed first.
func runLeakChecked(m *testing.M) int {
	code := testdb.Report(m).Run()
	if code != 0 {
		return code
	}
	if left := childProcesses(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "chaos: child processes left behind: %v\n", left)
		return 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, "goleak:", err)
		return 1
	}
	return 0
}

// childProcesses returns the pids of this process's live children, read
// from /proc (nil where there is no /proc). Every test kills and reaps its
// children in t.Cleanup, so there must be none once the tests are done.
func childProcesses() []string {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// childMain dispatches a child role. Every role reads its spec from specEnv.
func childMain(role, spec string) int {
	var err error
	switch role {
	case roleClient:
		var s clientSpec
		if err = json.Unmarshal([]byte(spec), &s); err == nil {
			err = clientMain(s)
		}
	case roleServer:
		var s serverSpec
		if err = json.Unmarshal([]byte(spec), &s); err == nil {
			err = serverMain(s)
		}
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos child %s: %v\n", role, err)
		return 1
	}
	return 0
}

// childCmd returns a command that re-executes this test binary as role.
func childCmd(role string, spec any) *exec.Cmd {
	b, err := json.Marshal(spec)
	if err != nil {
		panic(err) // the specs are plain structs
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role, specEnv+"="+string(b))
	return cmd
}

// built are the binaries of one test run.
type built struct {
	payments string // the payments example
	idemkit  string // the idemkit CLI
}

var (
	buildOnce sync.Once
	buildRes  built
	buildErr  error
)

// binaries builds the payments example and the idemkit CLI once per test
// run (with -race when the tests run under it) and returns their paths.
func binaries(t *testing.T) built {
	t.Helper()
	buildOnce.Do(func() {
		goBin := testbin.GoTool()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for _, b := range []struct{ out, pkg string }{
			{filepath.Join(binDir, "payments"), "github.com/idemkit/idemkit/examples/payments"},
			{filepath.Join(binDir, "idemkit"), "github.com/idemkit/idemkit/cmd/idemkit"},
		} {
			args := []string{"build", "-o", b.out}
			if raceEnabled {
				args = append(args, "-race")
			}
			out, err := exec.CommandContext(ctx, goBin, append(args, b.pkg)...).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		buildRes = built{payments: filepath.Join(binDir, "payments"), idemkit: filepath.Join(binDir, "idemkit")}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildRes
}
