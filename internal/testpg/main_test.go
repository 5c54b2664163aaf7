package testpg_test

import (
	"os"
	"testing"

	"github.com/idemkit/idemkit/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Report(m).Run()) }
