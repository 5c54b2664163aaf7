package recoverer

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/internal/testdb"
)

// TestMain fails the run if any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
