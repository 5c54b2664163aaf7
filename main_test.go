package idemkit

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests under goleak, or, when the test binary was
// re-executed as a child process by a multi-process test, the child's role.
func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(childMain(role))
	}
	goleak.VerifyTestMain(testdb.Report(m))
}
