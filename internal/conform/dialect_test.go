package conform_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/conform"
)

// The battery's dialects are the client's profiles: the same header, key
// encoding and limit, window, replay markers, in-progress and key-reused
// statuses. (LookupDialect derives them from internal/policy, which links
// no SQLite, so that the fakes and `idemkit check` do not link the
// client's queue; this test holds the derivation to the root package's
// KnownProfile.)
func TestLookupDialect_AgreesWithTheClientProfiles(t *testing.T) {
	t.Parallel()
	for _, name := range conform.DialectNames {
		p, ok := idemkit.KnownProfile(name)
		require.True(t, ok, name)
		d, ok := conform.LookupDialect(name)
		require.True(t, ok, name)
		require.Equal(t, p.KeyHeader, d.KeyHeader, name)
		require.Equal(t, p.KeyQuoted, d.KeyQuoted, name)
		require.Equal(t, p.KeyMaxLen, d.KeyMaxLen, name)
		require.Equal(t, p.Window, d.Window, name)
		require.Equal(t, p.ReplayHeaders, d.ReplayHeaders, name)
		var retry, reused []conform.Answer
		for _, a := range p.Retry {
			retry = append(retry, conform.Answer{Status: a.Status, Code: a.Code})
		}
		for _, a := range p.KeyReused {
			reused = append(reused, conform.Answer{Status: a.Status, Code: a.Code})
		}
		require.Equal(t, retry, d.InFlight, name)
		require.Equal(t, reused, d.KeyReused, name)
	}
	_, ok := conform.LookupDialect("acme")
	require.False(t, ok)
}
