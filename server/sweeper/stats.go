package sweeper

import (
	"sync"
	"time"
)

// Stats is what a Sweeper has done since it started, for the metrics an
// operator watches (package server/prommetrics exports them): a sweep that
// keeps failing, or a last success older than a few intervals, means
// expired records pile up.
type Stats struct {
	// Runs is the number of sweeps that ended, and Failures the number of
	// them that failed (a sweep stopped by Close is neither).
	Runs, Failures int64
	// Deleted is the number of records deleted, by every sweep.
	Deleted int64
	// LastSuccess is when the last successful sweep ended; zero before the
	// first.
	LastSuccess time.Time
	// LastDuration is how long the last sweep that ended took.
	LastDuration time.Duration
	// Interval and Grace are the Sweeper's Config.Interval and
	// Config.Grace, defaults applied: an expired record should be deleted
	// within about Interval + Grace of its expiry.
	Interval, Grace time.Duration
}

// stats accumulates a Sweeper's Stats.
type stats struct {
	mu sync.Mutex
	st Stats
}

// record adds one ended sweep.
func (s *stats) record(deleted int, failed bool, end time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Runs++
	s.st.Deleted += int64(deleted)
	s.st.LastDuration = took
	if failed {
		s.st.Failures++
	} else {
		s.st.LastSuccess = end
	}
}

// Stats returns what the sweeper has done since it started. It is safe to
// call concurrently with the sweeps and after Close.
func (s *Sweeper) Stats() Stats {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	st := s.stats.st
	st.Interval, st.Grace = s.cfg.Interval, s.cfg.Grace
	return st
}
