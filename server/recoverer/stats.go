package recoverer

import (
	"sync"
	"time"
)

// Stats is what a Recoverer has done since it started, for the metrics an
// operator watches (prommetrics.NewRecovererCollector exports them).
type Stats struct {
	// Passes is the number of passes that ended, and PassFailures the
	// number of them whose listing failed.
	Passes, PassFailures int64
	// Outcomes counts the claims looked at, by Outcome.
	Outcomes map[Outcome]int64
	// LastSuccess is when the last pass whose listing succeeded ended;
	// zero before the first.
	LastSuccess time.Time
	// Interval is the Recoverer's Config.Interval, defaults applied.
	Interval time.Duration
	// GivenUp is the number of claims the recoverer has given up on
	// (Config.MaxAttempts takeovers without a decision) that were still in
	// flight at the end of the last pass whose listing succeeded: each
	// stays in progress until a retry with its key or its expiry, its
	// external effect undecided.
	GivenUp int
}

// stats accumulates a Recoverer's Stats.
type stats struct {
	mu sync.Mutex
	st Stats
}

// pass counts a pass that ended at end; givenUp is what it left given up
// on (unused when its listing failed).
func (s *stats) pass(failed bool, end time.Time, givenUp int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Passes++
	if failed {
		s.st.PassFailures++
	} else {
		s.st.LastSuccess = end
		s.st.GivenUp = givenUp
	}
}

func (s *stats) event(ev Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Outcomes == nil {
		s.st.Outcomes = make(map[Outcome]int64, len(Outcomes))
	}
	s.st.Outcomes[ev.Outcome]++
}

// Stats returns what the recoverer has done since it started. It is safe
// to call concurrently with the passes and after Close.
func (r *Recoverer) Stats() Stats {
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	st := r.stats.st
	st.Outcomes = make(map[Outcome]int64, len(Outcomes))
	for _, o := range Outcomes {
		st.Outcomes[o] = r.stats.st.Outcomes[o]
	}
	st.Interval = r.cfg.Interval
	return st
}
