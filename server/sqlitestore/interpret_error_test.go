package sqlitestore

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
)

func TestInterpretError(t *testing.T) {
	t.Parallel()
	require.NoError(t, interpretError(nil))
	require.ErrorIs(t, interpretError(sql.ErrNoRows), server.ErrRecordNotFound)
	require.ErrorIs(t, interpretError(sql.ErrConnDone), server.ErrStoreUnavailable)
	other := errors.New("x")
	require.Equal(t, other, interpretError(other))
}
