package conform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Property IDs, in the order the battery runs them.
const (
	PropReplay       = "replay"
	PropWindow       = "window"
	PropChangedBody  = "changed-body"
	PropConcurrent   = "concurrent"
	PropInFlight     = "in-flight"
	PropScoped       = "scoped"
	PropHostileKeys  = "hostile-keys"
	PropErrorStorage = "error-storage"
)

// Run sends the battery to cfg.URL and returns the verdict on every
// property. It returns an error (matching ErrConfig) only for an invalid
// Config: an API that does not answer makes properties "cannot tell". ctx
// cancels the requests in flight; the properties not yet run are then
// "cannot tell".
func Run(ctx context.Context, cfg *Config) (*Report, error) {
	c := cfg.withDefaults()
	u, d, err := c.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Transport == nil {
		// The transport is the run's own: leave no idle connection behind.
		defer c.Transport.(*http.Transport).CloseIdleConnections()
	}
	b := &battery{cfg: c, d: d, s: newSender(c, u, d)}
	start := time.Now()
	rep := &Report{Method: c.Method, URL: u.String(), Dialect: d.Name, MaxRequests: c.MaxRequests}
	first, retry, replay := b.replay(ctx)
	rep.Results = append(rep.Results, replay, b.window(first, retry), b.changedBody(ctx))
	conc, inflight := b.concurrent(ctx)
	rep.Results = append(rep.Results, conc, inflight, b.scoped(ctx), b.hostileKeys(ctx), b.errorStorage(ctx))
	rep.Requests = c.MaxRequests - b.s.left()
	rep.Took = time.Since(start)
	switch {
	case rep.Failed():
		rep.Outcome = Fail
	case rep.Undecided():
		rep.Outcome = CannotTell
	default:
		rep.Outcome = Pass
	}
	return rep, nil
}

// battery is one run.
type battery struct {
	cfg *Config
	d   Dialect
	s   *sender
}

func result(id string, required bool, v Verdict, reason string, ev ...Exchange) Result {
	return Result{ID: id, Title: titles[id], Required: required, Verdict: v, Reason: reason, Evidence: ev}
}

// titles are the one-line statements of the properties.
var titles = map[string]string{
	PropReplay:       "a retry with the same key replays the first answer",
	PropWindow:       "the retention window is published",
	PropChangedBody:  "the same key with a changed body is refused, never replayed",
	PropConcurrent:   "concurrent duplicates execute once",
	PropInFlight:     "a duplicate in flight is answered 409 (or the profile's code) with Retry-After",
	PropScoped:       "keys are scoped to the caller",
	PropHostileKeys:  "hostile keys get 4xx, never 5xx or an execution",
	PropErrorStorage: "a 5xx is not stored (a 4xx may be)",
}

// answered reports whether ex got an answer of class (2 for 2xx...).
func answered(ex Exchange, class int) bool {
	return ex.Response != nil && ex.Response.Status/100 == class
}

// what describes the answer of ex in a few words.
func what(ex Exchange) string {
	if ex.Response == nil {
		return "no answer (" + ex.Err + ")"
	}
	s := strconv.Itoa(ex.Response.Status)
	if t := http.StatusText(ex.Response.Status); t != "" {
		s += " " + t
	}
	return s
}

// noAnswer is the verdict when a request that must be accepted was not.
func noAnswer(id string, required bool, ex Exchange, ev ...Exchange) Result {
	if ex.Response == nil {
		return result(id, required, CannotTell, "the request got no answer: "+ex.Err, ev...)
	}
	return result(id, required, CannotTell, fmt.Sprintf("the first request was answered %s, not 2xx: give --data and -H a request the API accepts", what(ex)), ev...)
}

// marker returns the replay marker of ex's answer, "" if none.
func (b *battery) marker(ex Exchange) string {
	if ex.Response == nil {
		return ""
	}
	return b.d.replayMarker(ex.Response.Header)
}

// bodyHashPrefix starts the identity of an answer without an id member.
const bodyHashPrefix = "body sha256:"

// identity names what a 2xx answer made: its resource id, else a hash of
// its body.
func (b *battery) identity(ex Exchange) string {
	var top map[string]json.RawMessage
	if json.Unmarshal([]byte(ex.Response.Body), &top) == nil {
		if raw, ok := top[b.cfg.IDField]; ok {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return s
			}
			return string(raw)
		}
	}
	sum := sha256.Sum256([]byte(ex.Response.Body))
	return bodyHashPrefix + hex.EncodeToString(sum[:6])
}

func (b *battery) replay(ctx context.Context) (first, retry Exchange, res Result) {
	k := b.cfg.NewKeyFunc()
	first = b.s.send(ctx, "first request", callerFirst, k, b.cfg.Body, false)
	if !answered(first, 2) {
		return first, Exchange{}, noAnswer(PropReplay, true, first, first)
	}
	retry = b.s.send(ctx, "retry: same key, same body", callerFirst, k, b.cfg.Body, false)
	fail := func(reason string) Result { return result(PropReplay, true, Fail, reason, first, retry) }
	switch {
	case retry.Response == nil:
		return first, retry, result(PropReplay, true, CannotTell, "the retry got no answer: "+retry.Err, first, retry)
	case b.marker(first) != "":
		return first, retry, fail("the first answer is marked as a replay (" + b.marker(first) + ")")
	case retry.Response.Status != first.Response.Status:
		return first, retry, fail(fmt.Sprintf("the retry was answered %s, the first request %s", what(retry), what(first)))
	case retry.Response.Body != first.Response.Body:
		return first, retry, fail("the retry's body differs from the first answer's " + firstDiff(first.Response.Body, retry.Response.Body))
	}
	m := b.marker(retry)
	if m == "" && b.d.MarkerRequired {
		return first, retry, fail(fmt.Sprintf("same status and body, but no replay marker (profile %s marks replays with %s: true)", b.d.Name, b.d.ReplayHeaders[0]))
	}
	if m == "" && strings.HasPrefix(b.identity(first), bodyHashPrefix) {
		return first, retry, result(PropReplay, true, CannotTell, fmt.Sprintf("same status %d and body bytes, but no replay marker and no %q member: a replay and a second execution look alike (--id-field names the member that tells them apart)", first.Response.Status, b.cfg.IDField), first, retry)
	}
	r := result(PropReplay, true, Pass, fmt.Sprintf("same status %d, same %d body bytes", first.Response.Status, len(first.Response.Body)), first, retry)
	if m != "" {
		r.Reason += ", marked " + m
		r.Notes = append(r.Notes, "replay marker: "+m)
	} else {
		r.Reason += fmt.Sprintf(", no replay marker (profile %s documents none)", b.d.Name)
	}
	return first, retry, r
}

// firstDiff says where two bodies first differ.
func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	excerpt := func(s string) string {
		lo, hi := max(0, i-20), min(len(s), i+40)
		return strconv.Quote(s[lo:hi])
	}
	return fmt.Sprintf("at byte %d (%d and %d bytes): %s vs %s", i, len(a), len(b), excerpt(a), excerpt(b))
}

func (b *battery) window(first, retry Exchange) Result {
	if !answered(first, 2) {
		return result(PropWindow, false, CannotTell, "the first request was not accepted", first)
	}
	for _, ex := range []Exchange{first, retry} {
		if ex.Response == nil {
			continue
		}
		v := ex.Response.Header.Get("Idempotency-Window")
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 {
			return result(PropWindow, false, Fail, fmt.Sprintf("Idempotency-Window: %q is not a positive number of seconds", v), ex)
		}
		r := result(PropWindow, false, Pass, fmt.Sprintf("Idempotency-Window: %s (%v)", v, time.Duration(n)*time.Second), ex)
		r.Notes = []string{"window: " + (time.Duration(n) * time.Second).String()}
		return r
	}
	switch {
	case b.d.WindowHeader:
		return result(PropWindow, false, Fail, fmt.Sprintf("no Idempotency-Window header: profile %s publishes the window on every keyed answer", b.d.Name), first)
	case b.d.Window > 0:
		return result(PropWindow, false, Pass, fmt.Sprintf("no Idempotency-Window header; profile %s documents %v (%s)", b.d.Name, b.d.Window, b.d.Doc), first)
	}
	return result(PropWindow, false, CannotTell, fmt.Sprintf("no Idempotency-Window header, and profile %s documents no window: ask the API how long it keeps keys", b.d.Name), first)
}

func (b *battery) changedBody(ctx context.Context) Result {
	changed, how := ChangeBody(b.cfg.Body)
	k := b.cfg.NewKeyFunc()
	first := b.s.send(ctx, "first request", callerFirst, k, b.cfg.Body, false)
	if !answered(first, 2) {
		return noAnswer(PropChangedBody, true, first, first)
	}
	second := b.s.send(ctx, "same key, changed body ("+how+")", callerFirst, k, changed, false)
	fail := func(reason string) Result { return result(PropChangedBody, true, Fail, reason, first, second) }
	r := second.Response
	switch {
	case r == nil:
		return result(PropChangedBody, true, CannotTell, "the changed request got no answer: "+second.Err, first, second)
	case b.marker(second) != "":
		return fail(fmt.Sprintf("answered %s marked %s: the first answer was replayed for a different request", what(second), b.marker(second)))
	case r.Status/100 == 2 && r.Body == first.Response.Body:
		return fail(fmt.Sprintf("answered %s with the first answer's body: a different request got the first one's answer (or ran again)", what(second)))
	case r.Status/100 == 2:
		return fail(fmt.Sprintf("answered %s with a new body: the changed request ran under the same key", what(second)))
	case matches(b.d.KeyReused, r.Status, r.Header, []byte(r.Body)):
		return result(PropChangedBody, true, Pass, fmt.Sprintf("refused: %s, the profile's key-reused answer", what(second)), first, second)
	case r.Status/100 == 4 && len(b.d.KeyReused) == 0:
		return result(PropChangedBody, true, Pass, fmt.Sprintf("refused: %s (profile %s documents no particular answer)", what(second), b.d.Name), first, second)
	}
	return fail(fmt.Sprintf("answered %s: want %s", what(second), answersText(b.d.KeyReused)))
}

// answersText describes answers for a person.
func answersText(as []Answer) string {
	var parts []string
	for _, a := range as {
		s := strconv.Itoa(a.Status)
		if a.Code != "" {
			s += " (" + a.Code + ")"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "a 4xx"
	}
	return strings.Join(parts, " or ")
}

// inFlight reports whether ex's answer means "in progress".
func (b *battery) inFlight(ex Exchange) bool {
	r := ex.Response
	return r != nil && !answered(ex, 2) && (r.Status == http.StatusConflict || matches(b.d.InFlight, r.Status, r.Header, []byte(r.Body)))
}

// busy reports whether ex's answer is a rate limit or an unavailable
// server asking to come back (429 or 503 with Retry-After).
func busy(ex Exchange) bool {
	r := ex.Response
	return r != nil && (r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable) && r.Header.Get("Retry-After") != ""
}

// followUps is how many sequential retries follow the burst at most.
const followUps = 3

func (b *battery) concurrent(ctx context.Context) (conc, inflight Result) {
	n := b.cfg.Concurrency
	if !b.s.reserve(n) {
		msg := fmt.Sprintf("the request budget (--max-requests %d) leaves %d requests, %d needed", b.cfg.MaxRequests, b.s.left(), n+1)
		return result(PropConcurrent, true, CannotTell, msg), result(PropInFlight, false, CannotTell, msg)
	}
	k := b.cfg.NewKeyFunc()
	burst := make([]Exchange, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			burst[i] = b.s.send(ctx, fmt.Sprintf("duplicate %d/%d (sent at once)", i+1, n), callerFirst, k, b.cfg.Body, true)
		})
	}
	close(start)
	wg.Wait()
	ev := slices.Clone(burst)
	// Follow-ups: the same request again once the burst is answered, until
	// a 2xx, waiting Retry-After (at most MaxWait).
	last := burst[n-1]
	for i := range followUps {
		if i > 0 && !b.wait(ctx, last) {
			break
		}
		last = b.s.send(ctx, fmt.Sprintf("after the duplicates, %d", i+1), callerFirst, k, b.cfg.Body, false)
		ev = append(ev, last)
		if last.Response == nil || answered(last, 2) || (!b.inFlight(last) && !busy(last)) {
			break
		}
	}

	var ids []string
	hasID := false
	var ok, replays, inflights, busies, others int
	var judged []Exchange // the non-2xx answers the in-flight property judges
	for _, ex := range ev {
		switch {
		case ex.Response == nil:
			others++
		case answered(ex, 2):
			id := b.identity(ex)
			if !strings.HasPrefix(id, bodyHashPrefix) {
				hasID = true
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
			if b.marker(ex) != "" {
				replays++
			} else {
				ok++
			}
		case b.inFlight(ex):
			inflights++
			judged = append(judged, ex)
		case busy(ex):
			busies++
		default:
			others++
			judged = append(judged, ex)
		}
	}
	tally := fmt.Sprintf("%d answers: %d 2xx unmarked, %d replayed, %d in flight, %d busy, %d other", len(ev), ok, replays, inflights, busies, others)
	switch {
	case len(ids) > 1 && hasID:
		conc = result(PropConcurrent, true, Fail, fmt.Sprintf("%d executions for one key (%s: %s); %s", len(ids), b.cfg.IDField, strings.Join(ids, ", "), tally), ev...)
	case len(ids) > 1:
		conc = result(PropConcurrent, true, Fail, fmt.Sprintf("%d different 2xx bodies for one key (no %q member: compared whole), so more than one execution or replays that differ; %s", len(ids), b.cfg.IDField, tally), ev...)
	case !hasID && b.d.MarkerRequired && ok > 1:
		conc = result(PropConcurrent, true, Fail, fmt.Sprintf("%d 2xx answers without a replay marker for one key: %d executions; %s", ok, ok, tally), ev...)
	case !hasID && !b.d.MarkerRequired && ok > 1:
		conc = result(PropConcurrent, true, CannotTell, fmt.Sprintf("%d identical 2xx answers without an %q member or a replay marker: executions cannot be counted from the answers (--id-field names the member that tells them apart); %s", ok, b.cfg.IDField, tally), ev...)
	case len(ids) == 0:
		conc = result(PropConcurrent, true, CannotTell, "no duplicate was answered 2xx; "+tally, ev...)
	default:
		conc = result(PropConcurrent, true, Pass, fmt.Sprintf("one execution (%s %s); %s", b.cfg.IDField, ids[0], tally), ev...)
	}
	if len(ids) == 0 {
		return conc, result(PropInFlight, false, CannotTell, "no copy was accepted: nothing was in flight; "+tally, ev...)
	}
	return conc, b.judgeInFlight(judged, n)
}

// judgeInFlight is the in-flight property over the non-2xx answers to
// duplicates.
func (b *battery) judgeInFlight(judged []Exchange, n int) Result {
	if len(judged) == 0 {
		return result(PropInFlight, false, CannotTell, fmt.Sprintf("no duplicate got an in-flight answer: all %d were answered 2xx (they did not overlap the first one's execution, which a slower handler would show, or each ran: see concurrent)", n))
	}
	var notes []string
	for _, ex := range judged {
		if !b.inFlight(ex) {
			return result(PropInFlight, false, Fail, fmt.Sprintf("a duplicate in flight was answered %s: want %s with Retry-After", what(ex), inFlightText(b.d)), judged...)
		}
		ra := ex.Response.Header.Get("Retry-After")
		if ra == "" {
			if b.d.RetryAfterRequired {
				return result(PropInFlight, false, Fail, fmt.Sprintf("an in-flight answer (%s) has no Retry-After: clients cannot tell when to come back", what(ex)), judged...)
			}
			notes = append(notes, fmt.Sprintf("%s without Retry-After (profile %s documents none)", what(ex), b.d.Name))
			continue
		}
		if _, ok := parseRetryAfter(ra, time.Now()); !ok {
			return result(PropInFlight, false, Fail, fmt.Sprintf("an in-flight answer has Retry-After %q: want seconds or an HTTP date", ra), judged...)
		}
	}
	r := result(PropInFlight, false, Pass, fmt.Sprintf("%d in-flight answer(s), %s", len(judged), inFlightSummary(judged)), judged...)
	r.Notes = notes
	return r
}

// inFlightSummary describes the in-flight answers: their statuses and
// Retry-After values.
func inFlightSummary(exs []Exchange) string {
	statuses, ras := map[int]bool{}, map[string]bool{}
	for _, ex := range exs {
		statuses[ex.Response.Status] = true
		ras[ex.Response.Header.Get("Retry-After")] = true
	}
	var ss, rs []string
	for s := range statuses {
		ss = append(ss, strconv.Itoa(s))
	}
	for r := range ras {
		if r == "" {
			r = "none"
		}
		rs = append(rs, r)
	}
	slices.Sort(ss)
	slices.Sort(rs)
	return "status " + strings.Join(ss, "/") + ", Retry-After " + strings.Join(rs, "/")
}

// wait sleeps ex's Retry-After (1s without one), at most MaxWait; false if
// ctx ended or the wait is longer than MaxWait.
func (b *battery) wait(ctx context.Context, ex Exchange) bool {
	d := time.Second
	if ex.Response != nil {
		if ra, ok := parseRetryAfter(ex.Response.Header.Get("Retry-After"), time.Now()); ok {
			d = ra
		}
	}
	if d > b.cfg.MaxWait {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// parseRetryAfter parses a Retry-After value: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 || n > 1<<31 {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}

func (b *battery) scoped(ctx context.Context) Result {
	required := b.cfg.OtherHeader != nil
	if !required {
		return result(PropScoped, false, CannotTell, "needs a second caller: give --as-other with its credential header")
	}
	k := b.cfg.NewKeyFunc()
	first := b.s.send(ctx, "first caller", callerFirst, k, b.cfg.Body, false)
	if !answered(first, 2) {
		return noAnswer(PropScoped, true, first, first)
	}
	second := b.s.send(ctx, "second caller, same key and body", callerSecond, k, b.cfg.Body, false)
	r := second.Response
	fail := func(reason string) Result { return result(PropScoped, true, Fail, reason, first, second) }
	firstID := b.identity(first)
	switch {
	case r == nil:
		return result(PropScoped, true, CannotTell, "the second caller's request got no answer: "+second.Err, first, second)
	case b.marker(second) == "" && r.Body == first.Response.Body && strings.HasPrefix(firstID, bodyHashPrefix):
		return result(PropScoped, true, CannotTell, fmt.Sprintf("the second caller got the same body as the first (%s), unmarked and without an %q member: a leak and a new request look alike", what(second), b.cfg.IDField), first, second)
	case b.marker(second) != "" || r.Body == first.Response.Body:
		return fail(fmt.Sprintf("the second caller got the first caller's answer (%s%s): keys are not scoped to the caller", what(second), markedText(b.marker(second))))
	case !strings.HasPrefix(firstID, bodyHashPrefix) && firstID != "" && strings.Contains(r.Body, firstID):
		return fail(fmt.Sprintf("the second caller's answer (%s) names the first caller's %s %s", what(second), b.cfg.IDField, firstID))
	case answered(second, 2):
		return result(PropScoped, true, Pass, fmt.Sprintf("a new request: %s with its own %s %s (the first caller's: %s)", what(second), b.cfg.IDField, b.identity(second), firstID), first, second)
	case r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden:
		return result(PropScoped, true, CannotTell, fmt.Sprintf("the second caller was refused (%s): check --as-other", what(second)), first, second)
	case b.inFlight(second) || matches(b.d.KeyReused, r.Status, r.Header, []byte(r.Body)) || r.Status == http.StatusUnprocessableEntity:
		return fail(fmt.Sprintf("the second caller's first request with this key was answered %s: it tells them another caller holds the key", what(second)))
	}
	return result(PropScoped, true, CannotTell, fmt.Sprintf("the second caller's request was answered %s: neither a new request nor a leak", what(second)), first, second)
}

func markedText(m string) string {
	if m == "" {
		return ", same body"
	}
	return ", marked " + m
}

// hostileKey is one malformed key line.
type hostileKey struct {
	name  string
	shown string
	lines []string
}

func (b *battery) hostileKeyList() []hostileKey {
	long := strings.Repeat("k", b.d.KeyMaxLen+1)
	ctl := "ctl\x01" + b.cfg.NewKeyFunc()
	k1, k2 := b.cfg.NewKeyFunc(), b.cfg.NewKeyFunc()
	return []hostileKey{
		{"empty key", `""`, []string{b.d.KeyValue("")}},
		{fmt.Sprintf("%d-byte key (profile allows %d)", len(long), b.d.KeyMaxLen), long[:12] + "…", []string{b.d.KeyValue(long)}},
		{"control character (U+0001)", strconv.Quote(ctl), []string{b.d.KeyValue(ctl)}},
		{"header sent twice", k1 + " and " + k2, []string{b.d.KeyValue(k1), b.d.KeyValue(k2)}},
	}
}

func (b *battery) hostileKeys(ctx context.Context) Result {
	var ev []Exchange
	var failed, unknown []string
	for _, hk := range b.hostileKeyList() {
		ex := b.s.sendRaw(ctx, hk.name, hk.shown, hk.lines, b.cfg.Body)
		switch {
		case ex.Response == nil:
			ex.Note = "cannot tell: no answer"
			unknown = append(unknown, hk.name+": no answer")
		case answered(ex, 4):
			ex.Note = "pass"
		case answered(ex, 2):
			ex.Note = "fail: executed"
			failed = append(failed, hk.name+": "+what(ex)+" (executed)")
		default:
			ex.Note = "fail"
			failed = append(failed, hk.name+": "+what(ex))
		}
		ev = append(ev, ex)
	}
	switch {
	case len(failed) > 0:
		return result(PropHostileKeys, true, Fail, strings.Join(failed, "; "), ev...)
	case len(unknown) > 0:
		return result(PropHostileKeys, true, CannotTell, strings.Join(unknown, "; "), ev...)
	}
	return result(PropHostileKeys, true, Pass, fmt.Sprintf("all %d refused with 4xx", len(ev)), ev...)
}

func (b *battery) errorStorage(ctx context.Context) Result {
	if b.cfg.ErrorBody == nil {
		return result(PropErrorStorage, false, CannotTell, "needs a request the API refuses: give --error-data")
	}
	k := b.cfg.NewKeyFunc()
	first := b.s.send(ctx, "refused request", callerFirst, k, b.cfg.ErrorBody, false)
	switch {
	case first.Response == nil:
		return result(PropErrorStorage, false, CannotTell, "no answer: "+first.Err, first)
	case first.Response.Status < 400:
		return result(PropErrorStorage, false, CannotTell, fmt.Sprintf("--error-data was answered %s, not an error", what(first)), first)
	}
	retry := b.s.send(ctx, "retry: same key, same body", callerFirst, k, b.cfg.ErrorBody, false)
	if retry.Response == nil {
		return result(PropErrorStorage, false, CannotTell, "the retry got no answer: "+retry.Err, first, retry)
	}
	m := b.marker(retry)
	if first.Response.Status >= 500 {
		switch {
		case m != "":
			return result(PropErrorStorage, false, Fail, fmt.Sprintf("the %s was stored and replayed (%s): every retry with this key gets the failure until the window ends", what(first), m), first, retry)
		case retry.Response.Body == first.Response.Body && !b.d.MarkerRequired:
			return result(PropErrorStorage, false, CannotTell, fmt.Sprintf("the retry got the same %s; without a replay marker (profile %s) a stored and a new failure look alike", what(retry), b.d.Name), first, retry)
		}
		return result(PropErrorStorage, false, Pass, fmt.Sprintf("the %s was not stored: the retry ran again (%s)", what(first), what(retry)), first, retry)
	}
	var stored string
	switch {
	case m != "":
		stored = "was stored: the retry was replayed (" + m + ")"
	case b.d.MarkerRequired:
		stored = "was not stored: the retry ran again (" + what(retry) + ")"
	default:
		stored = fmt.Sprintf("came back %s, unmarked (profile %s marks no replay, so stored or not cannot be told; a 4xx may be either)", what(retry), b.d.Name)
	}
	return result(PropErrorStorage, false, Pass, fmt.Sprintf("the %s %s", what(first), stored), first, retry)
}
