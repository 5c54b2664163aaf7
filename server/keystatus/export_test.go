package keystatus

import "time"

// SetClock sets the handler's clock (tests).
func (c *Config) SetClock(f func() time.Time) { c.timeNowFunc = f }
