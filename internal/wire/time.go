package wire

import (
	"fmt"
	"time"
)

// TimeLayout is how both halves store timestamps in their SQLite files:
// fixed-width RFC 3339 in UTC with milliseconds, so that text order is time
// order.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// FormatTime returns t in TimeLayout: converted to UTC and truncated (not
// rounded) to the millisecond.
func FormatTime(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format(TimeLayout)
}

// ParseTime parses a timestamp FormatTime wrote. It refuses any other width,
// so a value of another layout is an error rather than a wrong time. The
// result is in UTC.
func ParseTime(s string) (time.Time, error) {
	if len(s) != len(TimeLayout) {
		return time.Time{}, fmt.Errorf("timestamp %q: want %s", s, TimeLayout)
	}
	return time.Parse(TimeLayout, s)
}
