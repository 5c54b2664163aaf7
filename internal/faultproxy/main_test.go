package faultproxy_test

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
