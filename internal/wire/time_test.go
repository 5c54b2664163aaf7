package wire

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormatTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   time.Time
		want string
	}{
		{name: "UTC", in: time.Date(2026, 12, 1, 9, 5, 7, 123_000_000, time.UTC), want: "2026-12-01T09:05:07.123Z"},
		{name: "TruncatedNotRounded", in: time.Date(2026, 12, 1, 9, 5, 7, 999_999_999, time.UTC), want: "2026-12-01T09:05:07.999Z"},
		{name: "ZoneToUTC", in: time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("CET", 3600)), want: "2026-12-01T09:00:00.000Z"},
		{name: "Zero", in: time.Time{}, want: "0001-01-01T00:00:00.000Z"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, FormatTime(tt.in), tt.name)
		require.Len(t, FormatTime(tt.in), len(TimeLayout), tt.name)
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{in: "2026-12-01T09:05:07.123Z", want: time.Date(2026, 12, 1, 9, 5, 7, 123_000_000, time.UTC)},
		{in: "2026-12-01T09:05:07Z", wantErr: true},
		{in: "2026-12-01T09:05:07.123+01:00", wantErr: true},
		{in: "2026-13-01T09:05:07.123Z", wantErr: true},
		{in: "2026-12-01 09:05:07.123Z", wantErr: true},
		{in: "2026-12-01T09:05:07,123Z", wantErr: true}, // time.Parse takes the comma; FormatTime never writes it
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTime(tt.in)
		if tt.wantErr {
			require.Error(t, err, "ParseTime(%q) = %v", tt.in, got)
			continue
		}
		require.NoError(t, err, tt.in)
		require.True(t, tt.want.Equal(got), "ParseTime(%q) = %v, want %v", tt.in, got, tt.want)
		require.Equal(t, time.UTC, got.Location())
	}
}

// TestTime_TextOrderIsTimeOrder: the stored form sorts as the times do.
func TestTime_TextOrderIsTimeOrder(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 1, 23, 59, 59, 998_000_000, time.UTC)
	prev := FormatTime(base)
	for i := 1; i < 5; i++ {
		next := FormatTime(base.Add(time.Duration(i) * time.Millisecond))
		require.Less(t, prev, next)
		prev = next
	}
}
