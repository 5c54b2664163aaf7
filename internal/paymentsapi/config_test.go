package paymentsapi

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfig_WithDefaults(t *testing.T) {
	t.Parallel()

	got := (*Config)(nil).WithDefaults()
	require.Equal(t, DBDefault, got.DB)
	require.Equal(t, WindowDefault, got.Window)
	require.Equal(t, ModeTransactional, got.Mode)
	require.Equal(t, 30*time.Second, got.LeaseDuration)
	require.Equal(t, SweepIntervalDefault, got.SweepInterval)
	require.Equal(t, 3*time.Second, got.LockTimeout)
	require.NotNil(t, got.Logger)
	require.NoError(t, got.validate())

	got = (&Config{DSN: "postgres://x", Window: 10 * time.Second}).WithDefaults()
	require.Empty(t, got.DB, "no SQLite file with a DSN")
	require.Equal(t, 5*time.Second, got.LeaseDuration, "the default lease is capped at half the window")

	in := &Config{Delay: time.Second}
	_ = in.WithDefaults()
	require.Equal(t, &Config{Delay: time.Second}, in, "WithDefaults must not modify its receiver")
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Window: 500 * time.Millisecond}, "Config.Window"},
		{Config{Delay: -time.Second}, "Config.Delay"},
		{Config{Mode: "magic"}, "Config.Mode"},
		{Config{LeaseDuration: 48 * time.Hour}, "Config.LeaseDuration"},
		{Config{LockTimeout: -time.Second}, "Config.LockTimeout"},
	} {
		err := tc.cfg.WithDefaults().validate()
		require.ErrorContains(t, err, tc.want)
		_, err = Open(t.Context(), &tc.cfg)
		require.ErrorContains(t, err, tc.want, "Open validates")
	}
}

// TestApp_OnChargeStartAndPayments checks the hook the kill-and-resume demo
// watches and the ledger it reads.
func TestApp_OnChargeStartAndPayments(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, cfg *Config) {
		var mu sync.Mutex
		var calls []string
		cfg.OnChargeStartFunc = func(account, key string) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, account+"/"+key)
		}
		b := setup(t, cfg, nil)
		require.NotEmpty(t, b.app.Backend())

		require.Equal(t, 201, b.pay(t, "alice", "k1", usd40).status)
		require.Equal(t, 201, b.pay(t, "alice", "k1", usd40).status, "a replay does not run the handler")
		require.Equal(t, 400, b.pay(t, "alice", "k2", `{"amount": 0}`).status, "an invalid body is no charge")

		mu.Lock()
		require.Equal(t, []string{"alice/k1"}, calls)
		mu.Unlock()

		ps, err := b.app.Payments(t.Context(), "alice")
		require.NoError(t, err)
		require.Equal(t, b.list(t, "alice"), ps)
		require.Len(t, ps, 1)
		none, err := b.app.Payments(t.Context(), "bob")
		require.NoError(t, err)
		require.Empty(t, none)
	})
}

func TestOpen_NotADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "garbage.db")
	b := setup(t, &Config{DB: filepath.Join(t.TempDir(), "ok.db"), SweepInterval: -1}, nil)
	require.Equal(t, "sqlite", b.app.Backend())
	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 100)), 0o600))
	_, err := Open(t.Context(), &Config{DB: path})
	require.ErrorContains(t, err, "garbage.db")
}
