package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
)

func TestInterpretError(t *testing.T) {
	t.Parallel()
	other := errors.New("something else")
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	for _, tt := range []struct {
		name string
		in   error
		want error // nil: in itself
	}{
		{"no rows", pgx.ErrNoRows, server.ErrRecordNotFound},
		{"lock timeout", &pgconn.PgError{Code: pgerrcode.LockNotAvailable}, server.ErrInFlight},
		{"serialization", &pgconn.PgError{Code: pgerrcode.SerializationFailure}, server.ErrStoreBusy},
		{"deadlock", fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: pgerrcode.DeadlockDetected}), server.ErrStoreBusy},
		{"connection failure", &pgconn.PgError{Code: pgerrcode.ConnectionFailure}, server.ErrStoreUnavailable},
		{"admin shutdown", &pgconn.PgError{Code: pgerrcode.AdminShutdown}, server.ErrStoreUnavailable},
		{"cannot connect now", &pgconn.PgError{Code: pgerrcode.CannotConnectNow}, server.ErrStoreUnavailable},
		{"net error", netErr, server.ErrStoreUnavailable},
		{"disk full", &pgconn.PgError{Code: pgerrcode.DiskFull}, server.ErrStoreFull},
		{"value over a limit", &pgconn.PgError{Code: pgerrcode.ProgramLimitExceeded}, server.ErrStoreFull},
		{"statement timeout", &pgconn.PgError{Code: pgerrcode.QueryCanceled}, server.ErrStoreUnavailable},
		{"idle in transaction timeout", &pgconn.PgError{Code: pgerrcode.IdleInTransactionSessionTimeout}, server.ErrStoreUnavailable},
		{"unique violation is not translated", &pgconn.PgError{Code: pgerrcode.UniqueViolation}, nil},
		{"canceled stays canceled", context.Canceled, nil},
		{"unknown", other, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := interpretError(tt.in)
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
	require.NoError(t, interpretError(nil))
}
