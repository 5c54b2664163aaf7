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

// ParseTime parses a timestamp FormatTime wrote. It refuses any other text
// (another width, or what time.Parse would also take, such as a comma before
// the milliseconds), so that a value of another layout is an error rather
// than a time that sorts out of order. The result is in UTC.
func ParseTime(s string) (time.Time, error) {
	if len(s) != len(TimeLayout) {
		return time.Time{}, fmt.Errorf("timestamp %q: want %s", s, TimeLayout)
	}
	t, err := time.Parse(TimeLayout, s)
	if err != nil {
		return time.Time{}, err
	}
	if FormatTime(t) != s {
		return time.Time{}, fmt.Errorf("timestamp %q: want %s", s, TimeLayout)
	}
	return t, nil
}
