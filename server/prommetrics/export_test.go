package prommetrics

import "time"

// SetNow makes c report as if the time were now.
func (c *StoreCollector) SetNow(now time.Time) { c.nowFunc = func() time.Time { return now } }
