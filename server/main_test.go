package server

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test (of package server or server_test)
// leaves a goroutine behind: heartbeats, sweepers, pools and servers must all
// be stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
