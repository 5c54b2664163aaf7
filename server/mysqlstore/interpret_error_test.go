package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idemkit/server"
)

func TestInterpretError(t *testing.T) {
	t.Parallel()
	other := errors.New("something else")
	netErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	my := func(n uint16) error { return &mysql.MySQLError{Number: n, Message: "m"} }
	for _, tt := range []struct {
		name string
		in   error
		want error // nil: in itself
	}{
		{"no rows", sql.ErrNoRows, server.ErrRecordNotFound},
		{"lock wait timeout", my(erLockWaitTimeout), server.ErrInFlight},
		{"deadlock", fmt.Errorf("wrapped: %w", my(erLockDeadlock)), server.ErrStoreBusy},
		{"table full", my(erRecordFileFull), server.ErrStoreFull},
		{"disk full", my(erDiskFull), server.ErrStoreFull},
		{"over max_allowed_packet", my(erNetPacketTooLarge), server.ErrStoreFull},
		{"too many connections", my(erTooManyConnections), server.ErrStoreUnavailable},
		{"shutdown", my(erServerShutdown), server.ErrStoreUnavailable},
		{"read-only replica", my(erReadOnly), server.ErrStoreUnavailable},
		{"access denied", my(erAccessDenied), server.ErrStoreUnavailable},
		{"MariaDB statement timeout", my(erStatementTimeout), server.ErrStoreUnavailable},
		{"MySQL statement timeout", my(erQueryTimeout), server.ErrStoreUnavailable},
		{"killed", my(erConnectionKilled), server.ErrStoreUnavailable},
		{"invalid connection", mysql.ErrInvalidConn, server.ErrStoreUnavailable},
		{"bad connection", driver.ErrBadConn, server.ErrStoreUnavailable},
		{"connection done", sql.ErrConnDone, server.ErrStoreUnavailable},
		{"net error", netErr, server.ErrStoreUnavailable},
		{"unexpected EOF", io.ErrUnexpectedEOF, server.ErrStoreUnavailable},
		{"duplicate key is not translated", my(erDupEntry), nil},
		{"data too long is not translated", my(1406), nil},
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
			if tt.in != sql.ErrNoRows {
				require.ErrorIs(t, got, tt.in, "the cause stays visible")
			}
		})
	}
	require.NoError(t, interpretError(nil))
	require.True(t, isDuplicate(fmt.Errorf("w: %w", my(erDupEntry))))
	require.False(t, isDuplicate(my(erLockDeadlock)))
}

func TestLockWaitSeconds(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1ns": 1, "200ms": 1, "1s": 1, "1001ms": 2, "3s": 3} {
		d, err := time.ParseDuration(in)
		require.NoError(t, err)
		require.Equal(t, want, lockWaitSeconds(d), "lockWaitSeconds(%s)", in)
	}
}
