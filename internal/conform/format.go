package conform

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the report for a person: a table of verdicts, then the
// evidence of every property that did not pass (of every property when
// all is true).
func WriteText(w io.Writer, rep *Report, all bool) error {
	fmt.Fprintf(w, "idemkit check: %s %s, profile %s, %d requests (at most %d), %v\n\n",
		rep.Method, rep.URL, rep.Dialect, rep.Requests, rep.MaxRequests, rep.Took.Round(1e6))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROPERTY\tREQUIRED\tVERDICT\tWHY")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, yesNo(r.Required), r.Verdict, r.Reason)
	}
	tw.Flush()
	for _, r := range rep.Results {
		if (r.Verdict == Pass && !all) || len(r.Evidence) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s): %s\n", r.ID, r.Verdict, r.Title)
		writeEvidence(w, r.Evidence)
	}
	fmt.Fprintf(w, "\n%s\n", Summary(rep))
	return nil
}

// Summary is the report's last line.
func Summary(rep *Report) string {
	var failed, undecided []string
	for _, r := range rep.Results {
		switch {
		case r.Verdict == Fail:
			failed = append(failed, r.ID)
		case r.Required && r.Verdict != Pass:
			undecided = append(undecided, r.ID)
		}
	}
	switch {
	case len(failed) > 0:
		return "RESULT: fail (" + strings.Join(failed, ", ") + ")"
	case len(undecided) > 0:
		return "RESULT: cannot tell (" + strings.Join(undecided, ", ") + ")"
	}
	return "RESULT: pass (every required property passed)"
}

func writeEvidence(w io.Writer, exs []Exchange) {
	for _, ex := range exs {
		caller := ""
		if ex.Caller == callerSecond {
			caller = " [second caller]"
		}
		fmt.Fprintf(w, "  %s%s: key %s\n", ex.Step, caller, oneLine(ex.Key, 60))
		if ex.Response == nil {
			fmt.Fprintf(w, "    -> no answer: %s\n", ex.Err)
			continue
		}
		fmt.Fprintf(w, "    -> %s", what(ex))
		for _, h := range []string{"Retry-After", "Idempotency-Window", "Location"} {
			if v := ex.Response.Header.Get(h); v != "" {
				fmt.Fprintf(w, ", %s: %s", h, v)
			}
		}
		for _, h := range replaySpellings {
			if v := ex.Response.Header.Get(h); v != "" {
				fmt.Fprintf(w, ", %s: %s", h, v)
			}
		}
		fmt.Fprintf(w, " (%v)\n", ex.Took.Round(1e6))
		if ex.Response.Body != "" {
			fmt.Fprintf(w, "       %s\n", oneLine(ex.Response.Body, 160))
		}
		if ex.Note != "" {
			fmt.Fprintf(w, "       %s\n", ex.Note)
		}
	}
}

// JUnit XML, as CI servers read it.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as JUnit XML: one test case per property; a
// failed property is a failure, a property that cannot be told is
// skipped (a failure when it is required), each with its evidence.
func WriteJUnit(w io.Writer, rep *Report) error {
	s := junitSuite{Name: "idemkit check " + rep.URL, Tests: len(rep.Results), Time: fmt.Sprintf("%.3f", rep.Took.Seconds())}
	for _, r := range rep.Results {
		var ev strings.Builder
		writeEvidence(&ev, r.Evidence)
		c := junitCase{Name: r.ID + ": " + r.Title, Classname: "idemkit.check." + rep.Dialect}
		msg := &junitMessage{Message: r.Reason, Text: ev.String()}
		switch {
		case r.Verdict == Fail, r.Required && r.Verdict == CannotTell:
			if r.Verdict == CannotTell {
				msg.Message = "cannot tell: " + msg.Message
			}
			c.Failure = msg
			s.Failures++
		case r.Verdict == CannotTell:
			c.Skipped = msg
			s.Skipped++
		default:
			c.SystemOut = r.Reason + "\n" + ev.String()
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
