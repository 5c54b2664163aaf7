package idemkit

import (
	"slices"
	"sync"
)

// attemptLimit is Config.MaxAttempts: the attempts this Client started
// per intent, counted in memory since Open or NewClient, and the intents
// that reached the limit here. Those stay pending: claims pass them over
// (skipped), Do returns them with errMaxAttempts, another Client may send
// them again.
type attemptLimit struct {
	max       int
	mu        sync.Mutex
	tries     map[string]int // intent id -> attempts started here
	exhausted []string       // ids that reached the limit here
}

// tried counts an attempt of intent id started here and reports whether
// it is the last the limit allows.
func (l *attemptLimit) tried(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tries[id]++
	return l.max > 0 && l.tries[id] >= l.max
}

// exhaust marks intent id as past the limit here.
func (l *attemptLimit) exhaust(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.exhausted, id) {
		l.exhausted = append(l.exhausted, id)
	}
}

// isExhausted reports whether intent id is past the limit here.
func (l *attemptLimit) isExhausted(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.exhausted, id)
}

// skipped are the ids claims pass over: past the limit here.
func (l *attemptLimit) skipped() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.exhausted)
}

// forget drops the count of intent id, which ended (it is never claimed
// again).
func (l *attemptLimit) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.tries, id)
}
