package policy

import "time"

// The horizon is the last instant an attempt of an intent may start, so that
// every attempt reaches the server while it still remembers the key.
//
// The effective window of an intent is the window the client relies on for
// its host (the host profile's published window, else the configured
// window), shortened to the Idempotency-Window the host advertised, as
// remembered by the queue or learned from an answer. The horizon is the
// first attempt plus the effective window minus the margin: the smaller of
// the safety margin and a tenth of the window. A stored horizon only ever
// moves earlier.

// Horizon is one intent's effective window and horizon, for one claim.
type Horizon struct {
	// Window is the effective window.
	Window time.Duration
	// At is the horizon: no attempt starts after it.
	At time.Time
	// First is the intent's first attempt.
	First time.Time
	// Safety is the configured safety margin, the margin's cap.
	Safety time.Duration
}

// NewHorizon computes the horizon of an intent claimed at now: first is
// its first attempt (zero: this one, now), window the window the client
// relies on for its host (the profile's, else the configured one),
// hostWindow the Idempotency-Window the host last advertised (0: none),
// safety the safety margin, and stored the horizon already stored (zero:
// none), which it never moves later.
func NewHorizon(now, first time.Time, window, hostWindow, safety time.Duration, stored time.Time) Horizon {
	if first.IsZero() {
		first = now
	}
	if hostWindow > 0 && hostWindow < window {
		window = hostWindow
	}
	h := Horizon{Window: window, First: first, Safety: safety}
	h.At = first.Add(window - h.Margin())
	if !stored.IsZero() && stored.Before(h.At) {
		h.At = stored
	}
	return h
}

// Margin is what the horizon keeps from the end of the effective window.
func (h Horizon) Margin() time.Duration { return min(h.Safety, h.Window/10) }

// Lead is how long before the horizon a last attempt starts when the wait
// before it is cut short by the horizon.
func (h Horizon) Lead() time.Duration { return min(h.Margin()/4, time.Second) }

// Learn returns h with the effective window, and the horizon with it,
// shortened to a window the host just advertised (a longer one changes
// nothing).
func (h Horizon) Learn(w time.Duration) Horizon {
	if w >= h.Window {
		return h
	}
	h.Window = w
	if t := h.First.Add(w - h.Margin()); t.Before(h.At) {
		h.At = t
	}
	return h
}
