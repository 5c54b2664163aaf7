package migrate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		script string
		want   []string
	}{
		{"empty", "", nil},
		{"comments only", "-- a\n\n-- b\n", nil},
		{"one without a final semicolon", "CREATE TABLE t (x INT)", []string{"CREATE TABLE t (x INT)"}},
		{"leading comments dropped, inner kept", "-- why\nCREATE TABLE t (\n    -- the x\n    x INT\n);\n",
			[]string{"CREATE TABLE t (\n    -- the x\n    x INT\n)"}},
		{"two", "CREATE TABLE a (x INT);\n\n-- then\nCREATE INDEX i ON a (x);\n",
			[]string{"CREATE TABLE a (x INT)", "CREATE INDEX i ON a (x)"}},
		{"a semicolon inside a line does not split", "INSERT INTO t VALUES ('a;b');\n", []string{"INSERT INTO t VALUES ('a;b')"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, SplitStatements(tt.script))
		})
	}
}
