package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit"
)

// intentJSON is the JSON form of an intent (ls, submit, cancel, run, and
// with the request, outcome and attempt log: show and do). The fields up to
// LastError are always present (null when they do not apply).
type intentJSON struct {
	ID             string     `json:"id"`
	Key            string     `json:"key"`
	State          string     `json:"state"`
	Status         *int       `json:"status"`
	Replayed       bool       `json:"replayed"`
	Attempts       int        `json:"attempts"`
	NextAttemptAt  *time.Time `json:"next_attempt_at"`
	LastError      string     `json:"last_error"`
	Method         string     `json:"method"`
	URL            string     `json:"url"`
	FirstAttemptAt *time.Time `json:"first_attempt_at,omitempty"`
	// LeasedUntil, HolderPID and HolderHost name the process holding the
	// intent's lease, while one does.
	LeasedUntil *time.Time `json:"leased_until,omitempty"`
	HolderPID   int        `json:"holder_pid,omitempty"`
	HolderHost  string     `json:"holder_host,omitempty"`
	// Unanswered is the first attempt whose answer was lost, if any.
	Unanswered int        `json:"unanswered_attempt,omitempty"`
	Horizon    *time.Time `json:"horizon,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	Header     any        `json:"header,omitempty"`
	// CredentialHeaders names the credential headers the request had
	// (never their values: they are not stored).
	CredentialHeaders []string      `json:"credential_headers,omitempty"`
	Body              *string       `json:"body,omitempty"`
	BodyBase64        []byte        `json:"body_base64,omitempty"`
	Outcome           *outcomeJSON  `json:"outcome,omitempty"`
	AttemptLog        []attemptJSON `json:"attempt_log,omitempty"`
}

type outcomeJSON struct {
	Status     int     `json:"status"`
	Replayed   bool    `json:"replayed"`
	Header     any     `json:"header"`
	Body       *string `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
}

type attemptJSON struct {
	N          int        `json:"n"`
	Token      int64      `json:"token"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	Status     int        `json:"status,omitempty"`
	Error      string     `json:"error,omitempty"`
	Replayed   bool       `json:"replayed"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// bodyFields returns a body as text when it is valid UTF-8, else as base64.
func bodyFields(b []byte) (*string, []byte) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	return nil, b
}

// toJSON is the short form of an intent (one ls line).
func toJSON(in *idemkit.Intent) *intentJSON {
	j := &intentJSON{
		ID: in.ID, Key: in.Key, State: string(in.State), Method: in.Method, URL: in.URL,
		Attempts: in.Attempts, CreatedAt: in.CreatedAt.UTC(), UpdatedAt: in.UpdatedAt.UTC(), LastError: in.LastError,
		FirstAttemptAt: timePtr(in.FirstAttemptAt), Horizon: timePtr(in.Horizon),
		LeasedUntil: timePtr(in.LeasedUntil), HolderPID: in.HolderPID, HolderHost: in.HolderHost, Unanswered: in.Unanswered,
	}
	if in.State == idemkit.StatePending {
		j.NextAttemptAt = timePtr(in.NextAttemptAt)
	}
	if in.Outcome != nil {
		st := in.Outcome.Status
		j.Status = &st
		j.Replayed = in.Outcome.Replayed
	}
	return j
}

// toFullJSON is the long form: request, outcome and attempt log.
func toFullJSON(in *idemkit.Intent, log []*idemkit.Attempt) *intentJSON {
	j := toJSON(in)
	j.Header = in.Header
	j.CredentialHeaders = in.CredentialHeaders
	j.Body, j.BodyBase64 = bodyFields(in.Body)
	if in.Outcome != nil {
		o := &outcomeJSON{Status: in.Outcome.Status, Replayed: in.Outcome.Replayed, Header: in.Outcome.Header}
		o.Body, o.BodyBase64 = bodyFields(in.Outcome.Body)
		j.Outcome = o
	}
	j.AttemptLog = []attemptJSON{}
	for _, a := range log {
		j.AttemptLog = append(j.AttemptLog, attemptJSON{N: a.N, Token: a.Token, StartedAt: a.StartedAt.UTC(),
			FinishedAt: timePtr(a.FinishedAt), Status: a.Status, Error: a.Error, Replayed: a.Replayed})
	}
	return j
}

func writeJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// statusText is "201 Created".
func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return fmt.Sprintf("%d %s", code, t)
	}
	return fmt.Sprint(code)
}

// lastError is the intent's last error unless it only repeats the status
// ("status 400" next to "400 Bad Request").
func lastError(in *idemkit.Intent) string {
	if in.Outcome != nil && in.LastError == fmt.Sprintf("status %d", in.Outcome.Status) {
		return ""
	}
	return in.LastError
}

// stoppedText reports whether a stored error only says that a process
// stopped driving the intent (Ctrl-C, --timeout, Close), not why the
// attempts before failed.
func stoppedText(s string) bool {
	for _, p := range []string{"context canceled", "context deadline exceeded", "interrupted (", "client closed", "--max-attempts", "--timeout"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// withAttemptError returns in with LastError replaced by the error of its
// last real attempt when the stored one only says that a process stopped
// ("context canceled" hides "connection refused").
func withAttemptError(in *idemkit.Intent, log []*idemkit.Attempt) *idemkit.Intent {
	if !stoppedText(in.LastError) {
		return in
	}
	for i := len(log) - 1; i >= 0; i-- {
		a := log[i]
		switch {
		case a.Error != "" && !stoppedText(a.Error):
		case a.Status != 0:
		default:
			continue
		}
		cp := *in
		cp.LastError = a.Error
		if a.Error == "" {
			cp.LastError = fmt.Sprintf("status %d", a.Status)
		}
		return &cp
	}
	return in
}

// summary is the one-line human form of an intent: state, status,
// replayed, attempts, next attempt time, last error, id and key.
//
//	succeeded 201 Created, replayed=true, attempts=2, id=..., key=...
func summary(in *idemkit.Intent) string {
	var b strings.Builder
	b.WriteString(string(in.State))
	if in.Outcome != nil {
		fmt.Fprintf(&b, " %s, replayed=%v", statusText(in.Outcome.Status), in.Outcome.Replayed)
		if in.Outcome.Replayed {
			b.WriteString(" (answered from the server's idempotency store: the effect happened once, earlier)")
		}
	}
	if in.State == idemkit.StateUnknown {
		b.WriteString(" (outcome unknown: an earlier attempt's answer was lost and this answer says nothing about it; it may have taken effect: reconcile with the server, never retry under a new key)")
	}
	if in.State == idemkit.StateExpired {
		b.WriteString(" (outcome unknown: it may or may not have taken effect; reconcile with the server)")
	}
	fmt.Fprintf(&b, ", attempts=%d", in.Attempts)
	if in.State == idemkit.StatePending {
		fmt.Fprintf(&b, ", next_attempt_at=%s", fmtTime(in.NextAttemptAt))
	}
	if le := lastError(in); le != "" {
		fmt.Fprintf(&b, ", last_error=%q", le)
	}
	fmt.Fprintf(&b, ", id=%s, key=%s", in.ID, in.Key)
	return b.String()
}

// resultCode is the exit status an intent's state asks for: 0 succeeded
// or pending, 3 failed or canceled, 4 unknown or expired (the outcome is
// unknown).
func resultCode(in *idemkit.Intent) int {
	switch in.State {
	case idemkit.StateFailed, idemkit.StateCanceled:
		return exitFailed
	case idemkit.StateExpired, idemkit.StateUnknown:
		return exitExpired
	}
	return exitOK
}

// holder names the process holding an intent's lease: "pid 4242 on host".
func holder(in *idemkit.Intent) string {
	if in.HolderPID == 0 {
		return "a process not named (an older client)"
	}
	return fmt.Sprintf("pid %d on %s", in.HolderPID, in.HolderHost)
}

// shortID is the last 8 characters of an id, enough for show and cancel.
// Not the first: an id is a UUIDv7 whose first 12 hex characters are its
// creation time in milliseconds, shared by intents submitted together; its
// last 16 are random (as are those of the UUIDv4 ids of older queues).
func shortID(id string) string { return id[max(0, len(id)-8):] }

// listAll lists every intent (damaged rows reported in err, like List).
func listAll(ctx context.Context, c *idemkit.Client, state idemkit.IntentState) ([]*idemkit.Intent, error) {
	counts, err := c.Counts(ctx)
	if err != nil {
		return nil, err
	}
	n := 0
	for s, k := range counts {
		if state == "" || s == state {
			n += k
		}
	}
	if n == 0 {
		return nil, nil
	}
	return c.List(ctx, &idemkit.ListOptions{State: state, Limit: n})
}

// find returns the intent whose id is ref, starts with ref or ends with ref
// (the short id, see shortID), or whose key is ref. An ambiguous prefix or
// suffix is an error listing the candidates.
func find(ctx context.Context, c *idemkit.Client, ref string) (*idemkit.Intent, error) {
	if ref == "" {
		return nil, usagef("empty intent id")
	}
	in, err := c.Get(ctx, ref)
	if err == nil || !errors.Is(err, idemkit.ErrNotFound) {
		return in, err
	}
	all, lerr := listAll(ctx, c, "")
	if lerr != nil && !isCorrupt(lerr) {
		return nil, lerr
	}
	var byID, byKey []*idemkit.Intent
	for _, in := range all {
		if strings.HasPrefix(in.ID, ref) || strings.HasSuffix(in.ID, ref) {
			byID = append(byID, in)
		}
		if in.Key == ref {
			byKey = append(byKey, in)
		}
	}
	switch {
	case len(byKey) == 1 && len(byID) == 0:
		return byKey[0], nil
	case len(byID) == 1:
		return byID[0], nil
	case len(byID) > 1:
		ids := make([]string, 0, len(byID))
		for _, in := range byID {
			ids = append(ids, in.ID)
		}
		slices.Sort(ids)
		if len(ids) > 5 {
			ids = append(ids[:5], "...")
		}
		return nil, usagef("intent id prefix or short id %q is ambiguous: %d intents match (%s); give more characters", ref, len(byID), strings.Join(ids, ", "))
	}
	return nil, fmt.Errorf("no intent with id, id prefix, short id or key %q: %w", ref, idemkit.ErrNotFound)
}
