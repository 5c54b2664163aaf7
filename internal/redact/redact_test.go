package redact

import (
	"bytes"
	"log/slog"
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

// The named attributes are hashed wherever they are: in a record, in a
// group, in attributes given to With; the others are kept.
func TestHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), "key", "principal"))
	log.With("principal", "alice").Info("request", "key", "k-1", "status", 201,
		slog.Group("scope", slog.String("key", "k-2"), slog.String("endpoint", "*")))
	out := buf.String()
	for _, raw := range []string{"alice", "k-1", "k-2"} {
		require.NotContains(t, out, raw)
	}
	require.Contains(t, out, "principal="+Hash("alice"))
	require.Contains(t, out, "key="+Hash("k-1"))
	require.Contains(t, out, "scope.key="+Hash("k-2"))
	require.Contains(t, out, "scope.endpoint=*")
	require.Contains(t, out, "status=201")
}
