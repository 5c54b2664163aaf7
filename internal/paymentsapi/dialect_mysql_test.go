package paymentsapi

import (
	"database/sql/driver"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

func TestMySQLConfig(t *testing.T) {
	t.Parallel()
	cfg, maxConns, err := mysqlConfig("mysql://app:s%3Acret@db.internal/payments")
	require.NoError(t, err)
	require.Equal(t, "app", cfg.User)
	require.Equal(t, "s:cret", cfg.Passwd)
	require.Equal(t, "db.internal:3306", cfg.Addr, "the port defaults to 3306")
	require.Equal(t, "payments", cfg.DBName)
	require.True(t, cfg.InterpolateParams)
	require.Equal(t, 30*time.Second, cfg.ReadTimeout, "a frozen path cannot hold a request forever")
	require.Equal(t, myPoolMaxConnsDefault, maxConns)

	cfg, maxConns, err = mysqlConfig("mysql://root@127.0.0.1:3307/test?readTimeout=5s&pool_max_conns=4")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:3307", cfg.Addr)
	require.Equal(t, 5*time.Second, cfg.ReadTimeout, "the driver's own parameters")
	require.Equal(t, 4, maxConns)

	for _, bad := range []string{"mysql://root@127.0.0.1:3306", "mysql://root@127.0.0.1/test?pool_max_conns=0", "mysql://[::1"} {
		_, _, err := mysqlConfig(bad)
		require.Error(t, err, "dsn %q", bad)
	}
	_, _, err = mysqlConfig("mysql://root:hunter2@127.0.0.1:3306")
	require.NotContains(t, err.Error(), "hunter2", "the password stays out of the error")
	require.True(t, isMySQLDSN("mysql://x/y"))
	require.True(t, isMySQLDSN("mariadb://x/y"))
	require.False(t, isMySQLDSN("postgres://x/y"))
}

func TestMyDialect_MayHaveCommitted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"server error", &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
		{"wrapped server error", fmt.Errorf("insert: %w", &mysql.MySQLError{Number: 1205}), false},
		{"nothing sent", driver.ErrBadConn, false},
		{"answer lost", io.ErrUnexpectedEOF, true},
		{"timeout", os.ErrDeadlineExceeded, true},
		{"no error", nil, false},
		{"no row", fmt.Errorf("read: %w", errNoRows), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (myDialect{}).mayHaveCommitted(tt.err); got != tt.want {
				t.Fatalf("got %v want %v", got, tt.want)
			}
		})
	}
}
