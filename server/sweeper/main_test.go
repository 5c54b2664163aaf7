package sweeper

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
