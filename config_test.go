package idemkit

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfig_validate(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"lease shorter than attempt": {Config{LeaseDuration: time.Second, AttemptTimeout: 2 * time.Second}, "LeaseDuration"},
		"negative window":            {Config{Window: -time.Hour}, "Window"},
		"negative sleep":             {Config{MaxSleep: -1}, "MaxSleep"},
		"bad credential header":      {Config{CredentialHeaders: []string{"Auth orization"}}, "CredentialHeaders"},
		"negative concurrency":       {Config{Concurrency: -1}, "Concurrency"},
	} {
		err := tc.cfg.WithDefaults().validate()
		require.Error(t, err, name)
		require.Contains(t, err.Error(), tc.want, name)
	}
	require.NoError(t, (*Config)(nil).WithDefaults().validate())
}

// TestConfig_LoggerDefaultsToSlogDefault: the default logger is
// slog.Default() (INFO and up), not a discard handler.
func TestConfig_LoggerDefaultsToSlogDefault(t *testing.T) {
	t.Parallel()
	require.Same(t, slog.Default(), (&Config{}).WithDefaults().Logger)
	l := slog.New(slog.DiscardHandler)
	require.Same(t, l, (&Config{Logger: l}).WithDefaults().Logger)
}
