package paymentsapi

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
