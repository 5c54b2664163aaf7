package policy

import (
	"fmt"
	"time"
)

// HourlyAttemptsDefault is the default attempt budget: one attempt every
// 30 s on average (the backoff cap) in any hour.
const HourlyAttemptsDefault = 120

// Budget bounds the attempts of one intent in any hour
// (idemkit.Config.MaxAttemptsPerHour), whatever the server says (a
// Retry-After of 0, over and over): once Max attempts started within an
// hour, the next waits until the oldest of them is an hour old.
//
// It is a value: the backend reads Oldest from its attempt log.
type Budget struct {
	// Max is the most attempts in any hour; 0 or less: no budget.
	Max int
	// Oldest is the start of the Max-th most recent attempt, counting the
	// one just made; zero if there were fewer.
	Oldest time.Time
}

// Allow returns when an attempt planned at next may start under the
// budget: next, or the instant the Oldest attempt is an hour old if that
// is later (limited true).
func (b Budget) Allow(next time.Time) (at time.Time, limited bool) {
	if b.Max <= 0 || b.Oldest.IsZero() {
		return next, false
	}
	if allowed := b.Oldest.Add(time.Hour); allowed.After(next) {
		return allowed, true
	}
	return next, false
}

// Reason is what a wait the budget delayed adds to the intent's last
// error.
func (b Budget) Reason() string {
	return fmt.Sprintf("; %d attempts in the last hour (Config.MaxAttemptsPerHour)", b.Max)
}
