package queue

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idemkit/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
