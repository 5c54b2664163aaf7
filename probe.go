package idemkit

import (
	"context"
	"sync"
	"time"
)

// probeInterval is the longest a host that stopped answering goes without
// an attempt from this process while it has intents for it: one of them,
// the probe, retries at this interval (the others keep their backoff).
const probeInterval = time.Second

// probes is how a Client notices that an unreachable host is back. While
// attempts on a host get no answer (a transport error), one intent per
// host is its probe: its wait is capped at probeInterval. The others wait
// their normal backoff, written to the queue. When any attempt on the host
// gets an answer, the intents waiting for it are made due at once. A probe
// that spent half its attempt budget (Config.MaxAttemptsPerHour) hands
// the probe to another waiting intent of the host.
type probes struct {
	mu sync.Mutex
	// probe is, per host, the intent probing it and when it tries next.
	probe map[string]probeSlot
	// waiting is, per host, the intents rescheduled after getting no
	// answer from it.
	waiting map[string]map[string]bool
	// down holds the hosts whose last attempt here got no answer.
	down map[string]bool
}

// markDown records that host gave no answer and reports whether it was up.
func (p *probes) markDown(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down == nil {
		p.down = map[string]bool{}
	}
	was := p.down[host]
	p.down[host] = true
	return !was
}

// markUp records that host answered and reports whether it was down.
func (p *probes) markUp(host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.down[host]
	delete(p.down, host)
	return was
}

type probeSlot struct {
	id string
	at time.Time
}

// wants reports whether intent id, whose attempt on host just got no
// answer at now, must be the host's probe: no other intent tries the host
// within probeInterval.
func (p *probes) wants(host, id string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.probe[host]
	return !ok || s.id == id || !s.at.After(now) || s.at.After(now.Add(probeInterval))
}

// planned records when intent id, which got no answer from host, tries
// next; it becomes the probe if that is within probeInterval of now.
func (p *probes) planned(host, id string, now, next time.Time, persisted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probe == nil {
		p.probe, p.waiting = map[string]probeSlot{}, map[string]map[string]bool{}
	}
	if !next.After(now.Add(probeInterval)) {
		p.probe[host] = probeSlot{id: id, at: next}
	} else if s := p.probe[host]; s.id == id {
		delete(p.probe, host)
	}
	if persisted {
		if p.waiting[host] == nil {
			p.waiting[host] = map[string]bool{}
		}
		p.waiting[host][id] = true
	}
}

// answered forgets host's probe and returns the intents waiting for it.
func (p *probes) answered(host, id string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.probe, host)
	w := p.waiting[host]
	delete(w, id)
	if len(w) == 0 {
		return nil
	}
	delete(p.waiting, host)
	out := make([]string, 0, len(w))
	for other := range w {
		out = append(out, other)
	}
	return out
}

// handoff picks another waiting intent of host to probe at next.
func (p *probes) handoff(host, id string, next time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for other := range p.waiting[host] {
		if other != id {
			p.probe[host] = probeSlot{id: other, at: next}
			return other
		}
	}
	return ""
}

// noAnswer says how the next attempt of intent id, whose attempt on host
// got no answer at now is capped (policy.Facts.Probe): at probeInterval if
// it is the host's probe, not at all otherwise. A probe spends at most
// half of its MaxAttemptsPerHour budget probing (the rest is for its own
// backoff): past that, handoff is true and another waiting intent probes.
// The budget itself is applied by the policy.
func (c *Client) noAnswer(ctx context.Context, host, id string, now time.Time) (probe time.Duration, handoff bool) {
	if !c.probes.wants(host, id, now) {
		return 0, false
	}
	if half := c.cfg.MaxAttemptsPerHour / 2; half > 0 {
		t, err := c.q.NthLastAttempt(ctx, id, half)
		if err != nil || (!t.IsZero() && t.After(now.Add(-time.Hour))) {
			return 0, true
		}
	}
	return probeInterval, false
}
