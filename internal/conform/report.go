package conform

import (
	"net/http"
	"time"
)

// Verdict is the outcome of one property.
type Verdict string

const (
	// Pass: the answers show the property holds.
	Pass Verdict = "pass"
	// Fail: an answer shows it does not.
	Fail Verdict = "fail"
	// CannotTell: the answers decide nothing (the API could not be made to
	// show it, or the request budget ran out); Reason says why.
	CannotTell Verdict = "cannot tell"
)

// Result is the verdict on one property with the exchanges that decided it.
type Result struct {
	// ID names the property (see Properties).
	ID    string `json:"id"`
	Title string `json:"title"`
	// Required properties must pass for Report.OK.
	Required bool    `json:"required"`
	Verdict  Verdict `json:"verdict"`
	// Reason says, in one sentence, why.
	Reason string `json:"reason"`
	// Notes are facts found on the way (the replay marker's spelling, the
	// window).
	Notes    []string   `json:"notes,omitempty"`
	Evidence []Exchange `json:"evidence"`
}

// Exchange is one request the battery sent and what came back.
type Exchange struct {
	// Step says why it was sent ("first request", "duplicate 3/5"). Key
	// is the key sent (printable), Caller "first caller" or "second
	// caller"; credential headers are never recorded.
	Step    string `json:"step"`
	Method  string `json:"method"`
	URL     string `json:"url"`
	Key     string `json:"key"`
	Caller  string `json:"caller"`
	ReqBody string `json:"request_body,omitempty"`
	// Response is the answer, nil when there was none.
	Response *Response `json:"answer,omitempty"`
	// Err is the transport error when there was no answer.
	Err string `json:"error,omitempty"`
	// Took is how long the exchange took.
	Took time.Duration `json:"took_ns"`
	// Note is this exchange's own verdict, when it has one (hostile keys).
	Note string `json:"note,omitempty"`
}

// Response is a response as the battery saw it.
type Response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
	// Truncated: the body was longer than the battery reads.
	Truncated bool `json:"truncated,omitempty"`
}

// Report is the outcome of a run of the battery.
type Report struct {
	Method  string `json:"method"`
	URL     string `json:"url"`
	Dialect string `json:"profile"`
	// Requests is how many requests were sent, at most MaxRequests.
	Requests    int `json:"requests"`
	MaxRequests int `json:"max_requests"`
	// Outcome is the run's: fail if a property failed, else cannot tell
	// if a required property could not be told, else pass.
	Outcome Verdict       `json:"outcome"`
	Results []Result      `json:"results"`
	Took    time.Duration `json:"took_ns"`
}

// Failed reports whether a property failed.
func (r *Report) Failed() bool {
	for _, res := range r.Results {
		if res.Verdict == Fail {
			return true
		}
	}
	return false
}

// Undecided reports whether a required property could not be told.
func (r *Report) Undecided() bool {
	for _, res := range r.Results {
		if res.Required && res.Verdict != Pass {
			return true
		}
	}
	return false
}

// OK reports whether every required property passed and none failed.
func (r *Report) OK() bool { return !r.Failed() && !r.Undecided() }

// Result returns the result of the property id, if it ran.
func (r *Report) Result(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// Verdicts maps each property to its verdict (for tests and scripts).
func (r *Report) Verdicts() map[string]Verdict {
	m := make(map[string]Verdict, len(r.Results))
	for _, res := range r.Results {
		m[res.ID] = res.Verdict
	}
	return m
}
