package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", "sha256:e3b0c44298fc1c14"},
		{"alice", "sha256:2bd806c97f0e00af"},
	} {
		require.Equal(t, tc.want, Hash(tc.in), "Hash(%q)", tc.in)
	}
	require.NotEqual(t, Hash("alice"), Hash("bob"))
}
