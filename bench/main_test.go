package main

import (
	"github.com/idemkit/idemkit/internal/testdb"

	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a run leaves a goroutine behind: the HTTP
// server, the pools, the clients and the sweep all end with the run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testdb.Report(m))
}
