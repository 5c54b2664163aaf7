package conform

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Step is one property of the battery as planned: what it sends and how
// many requests at most.
type Step struct {
	Property string `json:"property"`
	Required bool   `json:"required"`
	Requests int    `json:"requests"`
	What     string `json:"what"`
}

// Plan returns the battery Run would send for cfg, without sending
// anything, and the most requests it can send (never more than
// cfg.MaxRequests: properties past the budget are "cannot tell").
func Plan(cfg *Config) ([]Step, int, error) {
	c := cfg.withDefaults()
	_, d, err := c.validate()
	if err != nil {
		return nil, 0, err
	}
	_, how := ChangeBody(c.Body)
	n := c.Concurrency
	steps := []Step{
		{PropReplay, true, 2, fmt.Sprintf("key K1: the request, then the same request again: same status and body bytes, a replay marker (%s)", markerText(d))},
		{PropWindow, false, 0, "from the answers to K1: Idempotency-Window, else the window profile " + d.Name + " documents"},
		{PropChangedBody, true, 2, "key K2: the request, then the same key with a changed body (" + how + "): want " + answersText(d.KeyReused) + ", never a replay"},
		{PropConcurrent, true, n + followUps, fmt.Sprintf("key K3: %d copies at once, then the same request once more (up to %d times while answered in flight, waiting Retry-After up to %v): one distinct %q among the 2xx answers", n, followUps, c.MaxWait, c.IDField)},
		{PropInFlight, false, 0, "from the answers to K3: every non-2xx answer is " + inFlightText(d) + retryAfterText(d)},
	}
	if c.OtherHeader != nil {
		steps = append(steps, Step{PropScoped, true, 2, "key K4: the request, then the same key and body as the second caller (--as-other): want a new request, never the first caller's answer, 409 or 422"})
	} else {
		steps = append(steps, Step{PropScoped, false, 0, "not sent: needs --as-other (cannot tell)"})
	}
	steps = append(steps, Step{PropHostileKeys, true, 4, fmt.Sprintf("the request with an empty key, a %d-byte key, a key with U+0001, the key header twice (raw HTTP/1.1): want 4xx each", d.KeyMaxLen+1)})
	if c.ErrorBody != nil {
		steps = append(steps, Step{PropErrorStorage, false, 2, "key K5: --error-data twice: a 5xx must not be replayed"})
	} else {
		steps = append(steps, Step{PropErrorStorage, false, 0, "not sent: needs --error-data (cannot tell)"})
	}
	total := 0
	for _, s := range steps {
		total += s.Requests
	}
	return steps, min(total, c.MaxRequests), nil
}

func markerText(d Dialect) string {
	if !d.MarkerRequired {
		return "optional: profile " + d.Name + " documents none"
	}
	return d.ReplayHeaders[0] + ": true"
}

func retryAfterText(d Dialect) string {
	if d.RetryAfterRequired {
		return " with Retry-After"
	}
	return " (Retry-After optional: profile " + d.Name + " documents none)"
}

// WritePlan writes the plan for a person: the target, one line per
// property, the request count.
func WritePlan(w io.Writer, cfg *Config) error {
	steps, total, err := Plan(cfg)
	if err != nil {
		return err
	}
	c := cfg.withDefaults()
	fmt.Fprintf(w, "idemkit check --dry-run: %s %s, profile %s; nothing is sent\n\n", c.Method, c.URL, c.Dialect)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROPERTY\tREQUIRED\tREQUESTS\tWHAT")
	for _, s := range steps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Property, yesNo(s.Required), s.Requests, s.What)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nat most %d requests (--max-requests %d), all to %s; redirects are not followed.\n", total, c.MaxRequests, c.URL)
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// oneLine squeezes s into one line of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// inFlightText lists the in-flight answers the battery accepts: any 409,
// and the profile's other statuses.
func inFlightText(d Dialect) string {
	as := []Answer{{Status: 409}}
	for _, a := range d.InFlight {
		if a.Status != 409 {
			as = append(as, a)
		}
	}
	return answersText(as)
}
