package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestInterpretPostgresError(t *testing.T) {
	t.Parallel()
	other := errors.New("something else")
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, tt := range []struct {
		name string
		in   error
		want error // nil: in itself
	}{
		{"no rows", pgx.ErrNoRows, ErrNotFound},
		{"lock timeout", &pgconn.PgError{Code: pgerrcode.LockNotAvailable}, ErrInFlight},
		{"serialization", &pgconn.PgError{Code: pgerrcode.SerializationFailure}, ErrStoreBusy},
		{"deadlock", fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: pgerrcode.DeadlockDetected}), ErrStoreBusy},
		{"connection failure", &pgconn.PgError{Code: pgerrcode.ConnectionFailure}, ErrStoreUnavailable},
		{"admin shutdown", &pgconn.PgError{Code: pgerrcode.AdminShutdown}, ErrStoreUnavailable},
		{"cannot connect now", &pgconn.PgError{Code: pgerrcode.CannotConnectNow}, ErrStoreUnavailable},
		{"net error", netErr, ErrStoreUnavailable},
		{"disk full", &pgconn.PgError{Code: pgerrcode.DiskFull}, ErrStoreFull},
		{"value over a limit", &pgconn.PgError{Code: pgerrcode.ProgramLimitExceeded}, ErrStoreFull},
		{"statement timeout", &pgconn.PgError{Code: pgerrcode.QueryCanceled}, ErrStoreUnavailable},
		{"idle in transaction timeout", &pgconn.PgError{Code: pgerrcode.IdleInTransactionSessionTimeout}, ErrStoreUnavailable},
		{"unique violation is not translated", &pgconn.PgError{Code: pgerrcode.UniqueViolation}, nil},
		{"canceled stays canceled", context.Canceled, nil},
		{"unknown", other, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := interpretPostgresError(tt.in)
			if tt.want == nil {
				require.Equal(t, tt.in, got)
				return
			}
			require.ErrorIs(t, got, tt.want)
			if tt.in != pgx.ErrNoRows {
				require.ErrorIs(t, got, tt.in, "the cause stays visible")
			}
		})
	}
	require.NoError(t, interpretPostgresError(nil))
}

func TestInterpretSQLiteError(t *testing.T) {
	t.Parallel()
	require.NoError(t, interpretSQLiteError(nil))
	require.ErrorIs(t, interpretSQLiteError(sql.ErrNoRows), ErrNotFound)
	require.ErrorIs(t, interpretSQLiteError(sql.ErrConnDone), ErrStoreUnavailable)
	other := errors.New("x")
	require.Equal(t, other, interpretSQLiteError(other))
}
