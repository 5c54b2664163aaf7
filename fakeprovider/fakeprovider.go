package fakeprovider

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/conform"
	"github.com/idemkit/idemkit/internal/wire"
)

// Broken is a set of deliberate bugs, the ones real idempotency
// implementations ship with.
type Broken uint

const (
	// CheckThenAct looks the key up, runs the request, and only then
	// stores it: concurrent duplicates all run.
	CheckThenAct Broken = 1 << iota
	// Unscoped shares keys between callers: a second caller with the same
	// key gets the first caller's answer.
	Unscoped
	// NoFingerprint replays the stored answer for any request with the
	// key, whatever its body.
	NoFingerprint
	// ReplayDifferentBody replays the status but rebuilds the body (a new
	// "created_at"), so a replay differs from the original.
	ReplayDifferentBody
	// NoRetryAfter leaves Retry-After out of in-flight answers.
	NoRetryAfter
	// StoreServerErrors stores 5xx answers and replays them until the key
	// expires.
	StoreServerErrors
)

// Config configures a fake. The zero value is valid.
type Config struct {
	// Delay is how long each execution takes. Defaults to 0.
	Delay time.Duration
	// Window is how long a key is kept. Defaults to the window the
	// provider documents, else 24h.
	Window time.Duration
	// ErrorWhenFunc, if set, is asked for every execution: a status of 400
	// or more makes the execution fail with that status (nothing is
	// created). Defaults to nil: every execution succeeds.
	ErrorWhenFunc func(body []byte) int
	// Broken breaks the fake on purpose. Defaults to 0 (none).
	Broken Broken
}

// Server is a running fake. Its URL accepts POST on any path.
type Server struct {
	*httptest.Server
	d   conform.Dialect
	cfg Config

	mu         sync.Mutex
	records    map[recordKey]*record
	executions int
	requests   int
	nextID     int
	drop       int
	fail       int
	failStatus int
	hold       int
	holdFor    time.Duration
}

type recordKey struct{ principal, key string }

type record struct {
	fingerprint [32]byte
	done        bool
	status      int
	header      http.Header
	body        []byte
	expires     time.Time
}

// New starts a fake speaking profile's dialect (see the package doc) on
// 127.0.0.1. Close it when done.
func New(profile string, cfg *Config) (*Server, error) {
	d, ok := conform.LookupDialect(profile)
	if !ok {
		return nil, fmt.Errorf("fakeprovider: unknown profile %q: want one of %s", profile, strings.Join(conform.DialectNames, ", "))
	}
	s := &Server{d: d, records: map[recordKey]*record{}}
	if cfg != nil {
		s.cfg = *cfg
	}
	if s.cfg.Window == 0 {
		s.cfg.Window = d.Window
	}
	if s.cfg.Window == 0 {
		s.cfg.Window = 24 * time.Hour
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s, nil
}

// Start is New for a test: it fails tb on an unknown profile and closes
// the server when the test ends.
func Start(tb testing.TB, profile string, cfg *Config) *Server {
	tb.Helper()
	s, err := New(profile, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Profile is the dialect's name.
func (s *Server) Profile() string { return s.d.Name }

// KeyHeader is the request header the fake reads the key from.
func (s *Server) KeyHeader() string { return s.d.KeyHeader }

// Executions is how many requests ran (created a resource or failed with
// ErrorWhenFunc's status), replays and refusals not counted.
func (s *Server) Executions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executions
}

// Requests is how many requests reached the handler.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// DropAnswers makes the next n executions run and store their answer,
// then close the connection without sending it: the client sees a
// network error after the effect happened.
func (s *Server) DropAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = n
}

// HoldNext keeps the next n executions in flight for d more than
// Config.Delay: duplicates meanwhile get the dialect's in-flight answer.
func (s *Server) HoldNext(n int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.holdFor = n, d
}

// FailNext answers the next n requests with status (a 5xx: with
// Retry-After: 1), running and storing nothing.
func (s *Server) FailNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail, s.failStatus = n, status
}

// maxBody bounds a request body.
const maxBody = 1 << 20

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.mu.Unlock()
	if r.Method != http.MethodPost {
		s.writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "only POST creates resources here", 0)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		s.writeError(w, http.StatusBadRequest, "invalid_request", "the body is unreadable or over 1 MiB", 0)
		return
	}
	principal := r.Header.Get("Authorization")
	if s.cfg.Broken&Unscoped != 0 {
		principal = ""
	}
	if s.takeFail(w) {
		return
	}
	lines := r.Header.Values(s.d.KeyHeader)
	if len(lines) == 0 {
		if s.d.KeyRequired {
			s.writeError(w, http.StatusBadRequest, wire.ProblemKeyMissing, s.d.KeyHeader+" is required", 0)
			return
		}
		st, h, b := s.execute(body)
		writeAnswer(w, st, h, b)
		return
	}
	key, err := s.parseKey(lines)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, wire.ProblemKeyInvalid, err.Error(), 0)
		return
	}
	fp := sha256.Sum256(append([]byte(r.Method+" "+r.URL.RequestURI()+"\n"), body...))
	rk := recordKey{principal, key}

	s.mu.Lock()
	rec, ok := s.records[rk]
	if ok && time.Now().After(rec.expires) {
		delete(s.records, rk)
		ok = false
	}
	if ok {
		s.mu.Unlock()
		s.answerExisting(w, rec, fp)
		return
	}
	rec = &record{fingerprint: fp, expires: time.Now().Add(s.cfg.Window)}
	if s.cfg.Broken&CheckThenAct == 0 {
		s.records[rk] = rec // claimed before the execution
	}
	s.mu.Unlock()

	st, h, b := s.execute(body)
	s.mu.Lock()
	stored := s.stores(st)
	if stored {
		rec.done, rec.status, rec.header, rec.body = true, st, h, b
		s.records[rk] = rec // check-then-act: stored only now
	} else if s.records[rk] == rec {
		delete(s.records, rk)
	}
	drop := s.drop > 0 && st < 400
	if drop {
		s.drop--
	}
	s.mu.Unlock()
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
	}
	writeAnswer(w, st, h, b)
}

// takeFail answers a request FailNext asked for.
func (s *Server) takeFail(w http.ResponseWriter) bool {
	s.mu.Lock()
	if s.fail <= 0 {
		s.mu.Unlock()
		return false
	}
	s.fail--
	st := s.failStatus
	s.mu.Unlock()
	ra := 0
	if st >= 500 {
		ra = 1
	}
	s.writeError(w, st, "injected_failure", "fakeprovider: FailNext", ra)
	return true
}

// parseKey reads the key in the dialect's encoding.
func (s *Server) parseKey(lines []string) (string, error) {
	if len(lines) != 1 {
		return "", fmt.Errorf("%s is repeated (%d field lines); send exactly one", s.d.KeyHeader, len(lines))
	}
	k := strings.Trim(lines[0], " \t")
	if s.d.KeyQuoted {
		var err error
		if k, err = wire.ParseKey(lines); err != nil {
			return "", err
		}
	}
	if err := wire.CheckKey(k, s.d.KeyMaxLen); err != nil {
		return "", err
	}
	return k, nil
}

// answerExisting answers a request whose key has a record.
func (s *Server) answerExisting(w http.ResponseWriter, rec *record, fp [32]byte) {
	if rec.fingerprint != fp && s.cfg.Broken&NoFingerprint == 0 {
		s.writeKeyReused(w)
		return
	}
	s.mu.Lock()
	done, st, h, b := rec.done, rec.status, rec.header.Clone(), rec.body
	s.mu.Unlock()
	if !done {
		s.writeInFlight(w)
		return
	}
	if s.cfg.Broken&ReplayDifferentBody != 0 {
		b = rebuild(b)
	}
	switch s.d.Name {
	case "idemkit", "stripe":
		h.Set(wire.HeaderReplayed, "true")
	}
	writeAnswer(w, st, h, b)
}

// execute runs a request: creates the resource, or fails as
// ErrorWhenFunc says.
func (s *Server) execute(body []byte) (int, http.Header, []byte) {
	s.mu.Lock()
	s.executions++
	s.nextID++
	id := s.nextID
	wait := s.cfg.Delay
	if s.hold > 0 {
		s.hold--
		wait += s.holdFor
	}
	s.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait) // the fake's work, not a test's synchronisation
	}
	if s.cfg.ErrorWhenFunc != nil {
		if st := s.cfg.ErrorWhenFunc(body); st >= 400 {
			h, b := s.errorBody(st, "request_failed", "the request failed (ErrorWhenFunc)")
			return st, h, b
		}
	}
	res := map[string]any{
		"id":         s.idPrefix() + strconv.Itoa(id),
		"status":     "succeeded",
		"created_at": time.Now().UTC().Format(time.RFC3339Nano),
	}
	var req map[string]any
	if json.Unmarshal(body, &req) == nil {
		if a, ok := req["amount"]; ok {
			res["amount"] = a
		}
	}
	b, _ := json.Marshal(res)
	h := s.baseHeader()
	h.Set("Content-Type", "application/json")
	st := http.StatusCreated
	if s.d.Name == "stripe" || s.d.Name == "adyen" {
		st = http.StatusOK
	}
	return st, h, b
}

// stores reports whether an answer of status st is stored.
func (s *Server) stores(st int) bool {
	switch {
	case st < 400:
		return true
	case s.d.Name == "checkout":
		return false // only successfully processed requests are replayed
	case s.d.Name == "stripe", s.cfg.Broken&StoreServerErrors != 0:
		return true
	}
	return st < 500
}

func (s *Server) idPrefix() string {
	switch s.d.Name {
	case "stripe":
		return "ch_"
	case "adyen":
		return "psp_"
	case "paypal":
		return "PAY-"
	case "ietf":
		return "res_"
	}
	return "pay_"
}

// baseHeader is the dialect's headers on every keyed answer.
func (s *Server) baseHeader() http.Header {
	h := http.Header{}
	if s.d.WindowHeader {
		h.Set(wire.HeaderWindow, strconv.Itoa(int(s.cfg.Window/time.Second)))
	}
	return h
}

// rebuild gives a stored JSON body a new created_at (ReplayDifferentBody).
func rebuild(b []byte) []byte {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return append(bytes.Clone(b), ' ')
	}
	m["created_at"] = time.Now().UTC().Add(time.Millisecond).Format(time.RFC3339Nano)
	out, _ := json.Marshal(m)
	return out
}

func writeAnswer(w http.ResponseWriter, st int, h http.Header, b []byte) {
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.WriteHeader(st)
	w.Write(b)
}

// writeInFlight is the dialect's "still in progress".
func (s *Server) writeInFlight(w http.ResponseWriter) {
	ra := 1
	if (!s.d.RetryAfterRequired && s.d.Name != "adyen") || s.cfg.Broken&NoRetryAfter != 0 {
		ra = 0
	}
	switch s.d.Name {
	case "stripe":
		s.writeJSON(w, http.StatusConflict, map[string]any{"error": map[string]any{"type": "idempotency_error", "code": "idempotency_key_in_use",
			"message": "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through)."}}, ra)
	case "checkout":
		s.writeJSON(w, http.StatusConflict, map[string]any{"error_type": "request_in_progress", "error_codes": []string{"idempotency_key_in_use"}}, ra)
	case "paypal":
		s.writeJSON(w, http.StatusConflict, map[string]any{"name": "RESOURCE_CONFLICT", "message": "A request with this PayPal-Request-Id is being processed."}, ra)
	default:
		s.writeError(w, http.StatusConflict, wire.ProblemInFlight, "A request with this key is still in progress", ra)
	}
}

// writeKeyReused is the dialect's "key used with another request".
func (s *Server) writeKeyReused(w http.ResponseWriter) {
	switch s.d.Name {
	case "stripe":
		s.writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"type": "idempotency_error",
			"message": "Keys for idempotent requests can only be used with the same parameters they were first used with."}}, 0)
	case "paypal":
		s.writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"name": "UNPROCESSABLE_ENTITY",
			"details": []map[string]string{{"issue": "PAYPAL_REQUEST_ID_PREVIOUSLY_USED", "description": "The PayPal-Request-ID has already been used for another request."}}}, 0)
	default:
		s.writeError(w, http.StatusUnprocessableEntity, wire.ProblemKeyReused, "The key was used with a different request", 0)
	}
}

// errorBody is the dialect's error body for status st.
func (s *Server) errorBody(st int, code, msg string) (http.Header, []byte) {
	h := s.baseHeader()
	var v any
	switch s.d.Name {
	case "stripe":
		typ := "invalid_request_error"
		if st >= 500 {
			typ = "api_error"
		}
		v = map[string]any{"error": map[string]any{"type": typ, "code": code, "message": msg}}
	case "adyen":
		v = map[string]any{"status": st, "errorCode": code, "message": msg, "errorType": "validation"}
	case "checkout":
		v = map[string]any{"error_type": code, "error_codes": []string{code}}
	case "paypal":
		v = map[string]any{"name": strings.ToUpper(code), "message": msg}
	default:
		typ := code
		if strings.Contains(code, "-") {
			typ = wire.ProblemType(code)
		}
		v = map[string]any{"type": typ, "title": msg, "status": st}
		b, _ := json.Marshal(v)
		h.Set("Content-Type", "application/problem+json")
		return h, b
	}
	b, _ := json.Marshal(v)
	h.Set("Content-Type", "application/json")
	return h, b
}

func (s *Server) writeError(w http.ResponseWriter, st int, code, msg string, retryAfter int) {
	h, b := s.errorBody(st, code, msg)
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeAnswer(w, st, h, b)
}

func (s *Server) writeJSON(w http.ResponseWriter, st int, v any, retryAfter int) {
	b, _ := json.Marshal(v)
	h := s.baseHeader()
	h.Set("Content-Type", "application/json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	writeAnswer(w, st, h, b)
}
