package idemkit

import "time"

// The horizon is the last instant an attempt of an intent may start, so that
// every attempt reaches the server while it still remembers the key.
//
// The effective window of an intent is the window the client relies on for
// its host (the host profile's published window, else Config.Window),
// shortened to the Idempotency-Window the host advertised, as remembered in
// the queue or learned from an answer. The horizon is the first attempt plus
// the effective window minus the margin: the smaller of Config.SafetyMargin
// and a tenth of the window. A stored horizon only ever moves earlier.

// horizon is one intent's effective window and horizon, for one claim.
type horizon struct {
	// window is the effective window.
	window time.Duration
	// at is the horizon.
	at time.Time
	// first is the intent's first attempt.
	first time.Time
	// safety is Config.SafetyMargin, the margin's cap.
	safety time.Duration
}

// plan returns the planFunc for a claim at now: it computes the effective
// window of the claimed intent and its horizon, never later than the one
// stored.
func (c *Client) plan(now time.Time) planFunc {
	return func(in *Intent, hostWindow time.Duration) horizon {
		first := in.FirstAttemptAt
		if first.IsZero() {
			first = now
		}
		w := c.cfg.Window
		if p := c.cfg.profileFor(in.URL); p.Window > 0 {
			w = p.Window
		}
		if hostWindow > 0 && hostWindow < w {
			w = hostWindow
		}
		h := horizon{window: w, first: first, safety: c.cfg.SafetyMargin}
		h.at = first.Add(w - h.margin())
		if !in.Horizon.IsZero() && in.Horizon.Before(h.at) {
			h.at = in.Horizon
		}
		return h
	}
}

// margin is what the horizon keeps from the end of the effective window.
func (h *horizon) margin() time.Duration { return min(h.safety, h.window/10) }

// lead is how long before the horizon a last attempt starts when the wait
// before it is cut short by the horizon.
func (h *horizon) lead() time.Duration { return min(h.margin()/4, time.Second) }

// learn shortens the effective window, and the horizon with it, to a
// window the host just advertised.
func (h *horizon) learn(w time.Duration) {
	if w >= h.window {
		return
	}
	h.window = w
	if t := h.first.Add(w - h.margin()); t.Before(h.at) {
		h.at = t
	}
}
