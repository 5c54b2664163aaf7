package tcpfault_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/internal/tcpfault"
)

// packet frames a MySQL protocol payload with its header.
func packet(seq byte, payload string) string {
	n := len(payload)
	return string([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}) + payload
}

func TestMySQLCommitQuery(t *testing.T) {
	t.Parallel()
	commit := packet(0, "\x03COMMIT")
	for name, tc := range map[string]struct {
		chunk string
		want  bool
	}{
		"alone":                 {commit, true},
		"after a statement end": {packet(0, "\x19\x01\x00\x00\x00") + commit, true},
		"another query":         {packet(0, "\x03SELECT 1"), false},
		"commit in a string":    {packet(0, "\x03SELECT '\x03COMMIT'"), false},
		"rollback":              {packet(0, "\x03ROLLBACK"), false},
		"split":                 {commit[:6], false},
		"empty":                 {"", false},
	} {
		require.Equal(t, tc.want, tcpfault.MySQLCommitQuery([]byte(tc.chunk)), name)
	}
}

func TestPostgresCommitComplete(t *testing.T) {
	t.Parallel()
	commitComplete := "C\x00\x00\x00\x0bCOMMIT\x00"
	ready := "Z\x00\x00\x00\x05I"
	require.True(t, tcpfault.PostgresCommitComplete([]byte(commitComplete+ready)))
	require.True(t, tcpfault.PostgresCommitComplete([]byte("C\x00\x00\x00\x0dUPDATE 1\x00"+commitComplete+ready)), "at the end of a pipeline")
	require.False(t, tcpfault.PostgresCommitComplete([]byte("C\x00\x00\x00\x0dUPDATE 1\x00"+ready)))
	require.False(t, tcpfault.PostgresCommitComplete([]byte("C\x00\x00\x00\x0dROLLBACK\x00"+ready)))
}

func TestContains(t *testing.T) {
	t.Parallel()
	b := []byte("INSERT 0 1\x00")
	m := tcpfault.Contains(b)
	b[0] = 'X' // Contains keeps its own copy
	require.True(t, m([]byte("C\x00\x00\x00\x0fINSERT 0 1\x00Z")))
	require.False(t, m([]byte("C\x00\x00\x00\x0fXNSERT 0 1\x00Z")))
}
