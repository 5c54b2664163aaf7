package main

import (
	"context"
	"database/sql"
	"io"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/testdb"
)

func TestShortRun_MySQLSectionPassesEveryCheck(t *testing.T) {
	t.Parallel()
	cfg := shortConfig(t)
	cfg.MySQLDSN = testdb.DSN(t, testdb.MySQL)
	cfg.MySQL = true
	var table strings.Builder
	_, err := run(context.Background(), cfg, &table, io.Discard)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	modes := []string{mysqlBaseline, "transactional", "lease", overheadMode}
	requireCells(t, r, "mysql", scenarioNewKey, modes, cfg.Clients)
	requireCells(t, r, "mysql", scenarioReplay, modes, cfg.Clients)
	require.NotEmpty(t, r.Machine.MySQL)
	require.Empty(t, r.Skipped)
	require.Contains(t, table.String(), "mysql, new-key (baseline: insert-and-catch")

	base, err := mysql.ParseDSN(cfg.MySQLDSN)
	require.NoError(t, err)
	base.DBName = ""
	db, err := sql.Open("mysql", base.FormatDSN())
	require.NoError(t, err)
	defer db.Close()
	var left int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?",
		r.Settings.MySQLDatabase).Scan(&left))
	require.Zero(t, left, "the run's database %s was not dropped", r.Settings.MySQLDatabase)
}

// With no MySQL DSN the section is skipped, said so on the progress output,
// in the table and in the report, and the rest of the run goes on.
func TestRun_SkipsTheMySQLSectionWithoutADSN(t *testing.T) {
	t.Parallel()
	cfg := shortConfig(t)
	cfg.MySQL = true
	cfg.MySQLDSN = ""
	var table, progress strings.Builder
	_, err := run(context.Background(), cfg, &table, &progress)
	require.NoError(t, err)
	r := readReport(t, cfg.Out)
	require.Len(t, r.Skipped, 1)
	require.Contains(t, r.Skipped[0], "IDEM_TEST_MYSQL")
	require.Contains(t, progress.String(), "mysql: skipped")
	require.Contains(t, table.String(), "mysql: skipped")
	require.Empty(t, r.Cells)
}
