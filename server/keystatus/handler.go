package keystatus

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// Status is the "status" of an answer.
type Status string

const (
	// StatusInProgress: the caller's request with this key holds a claim
	// and has not finished (or its process died and the lease has not
	// been taken over yet).
	StatusInProgress Status = "in_progress"
	// StatusCompleted: the response is stored; a retry with the key
	// replays it.
	StatusCompleted Status = "completed"
	// StatusUnknown: no live record of the caller's for this key.
	StatusUnknown Status = "unknown"
)

// Answer is the JSON body of a 200 answer.
type Answer struct {
	Key    string `json:"key"`
	Status Status `json:"status"`
	// Endpoint is the operation the record is scoped to (absent when
	// unknown).
	Endpoint string `json:"endpoint,omitempty"`
	// AgeSeconds is how long ago the record was first claimed, in whole
	// seconds (in_progress only).
	AgeSeconds *int64 `json:"age_seconds,omitempty"`
	// ResponseStatus is the stored response's status (completed only).
	ResponseStatus int `json:"response_status,omitempty"`
	// CreatedAt is when the record was first claimed (the original
	// request's arrival; kept by takeovers), RFC 3339 in UTC. For a
	// completed record it is not the time of completion, which no store
	// keeps.
	CreatedAt string `json:"created_at,omitempty"`
	// Response is the stored response, when Config.ShowResponseFunc
	// allows it.
	Response *Response `json:"response,omitempty"`
}

// Response is a stored response as the lookup shows it.
type Response struct {
	Status  int         `json:"status"`
	Headers http.Header `json:"headers"`
	// BodyBase64 is the body, standard base64 with padding.
	BodyBase64 string `json:"body_base64"`
	// BodyOmitted is true when the body was too large to store (a replay
	// sends Idempotent-Response-Omitted: true and no body).
	BodyOmitted bool `json:"body_omitted,omitempty"`
}

// maxScopePartBytes is the middleware's bound on a principal and an
// operation name.
const maxScopePartBytes = 512

// Handler is the status lookup. Mount it at a pattern with a {key}
// wildcard, e.g. "GET /v1/idempotency-keys/{key}"; behind a router without
// Go 1.22 path values the last segment of the path is the key.
type Handler struct {
	store  server.Store
	cfg    *Config
	ops    map[string]bool
	window string
}

// New returns a Handler reading store. cfg must set PrincipalFunc. It
// returns an error naming the field of an invalid Config.
func New(store server.Store, cfg *Config) (*Handler, error) {
	if store == nil {
		return nil, errors.New("idemkit/server/keystatus: store is nil")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ops := make(map[string]bool, len(cfg.Operations))
	for _, op := range cfg.Operations {
		ops[op] = true
	}
	return &Handler{store: store, cfg: cfg, ops: ops,
		window: strconv.FormatInt(int64(cfg.Window/time.Second), 10)}, nil
}

// ServeHTTP answers a lookup (GET or HEAD; anything else is 405).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set(wire.HeaderWindow, h.window)
	principal, err := h.cfg.PrincipalFunc(r)
	if err == nil && principal == "" {
		err = errors.New("PrincipalFunc returned an empty principal")
	}
	if err != nil {
		writeProblem(w, http.StatusUnauthorized, wire.ProblemUnauthenticated, "The request has no authenticated principal, so its Idempotency-Key cannot be scoped.")
		return
	}
	if validScopePart(principal) != nil {
		writeProblem(w, http.StatusUnauthorized, wire.ProblemPrincipalInvalid,
			fmt.Sprintf("The request's principal cannot scope an Idempotency-Key: it must be valid UTF-8 without control characters, at most %d bytes.", maxScopePartBytes))
		return
	}
	key, err := pathKey(r)
	if err == nil {
		err = wire.CheckKey(key, wire.MaxKeyBytes)
	}
	if err != nil {
		detail := "The idempotency key is malformed."
		var ke *wire.KeyError
		if errors.As(err, &ke) {
			detail = "The idempotency key is malformed: " + ke.Reason + "."
		}
		writeProblem(w, http.StatusBadRequest, wire.ProblemKeyInvalid, detail)
		return
	}
	ops := h.cfg.Operations
	if q := r.URL.Query(); q.Has("endpoint") {
		op := q.Get("endpoint")
		if len(q["endpoint"]) != 1 || !h.ops[op] {
			writeProblem(w, http.StatusBadRequest, wire.ProblemEndpointInvalid,
				"The endpoint parameter names no operation this lookup covers; give the operation name the route scopes keys by, once, or leave it out.")
			return
		}
		ops = []string{op}
	}

	// One Get per operation, whatever it finds: the work done for another
	// principal's key is the work done for a key never used.
	now := h.cfg.timeNowFunc()
	var found []*server.Record
	var failed error
	for _, op := range ops {
		rec, err := h.get(r.Context(), server.Scope{Principal: principal, Endpoint: op, Key: key}, now)
		switch {
		case err == nil:
			found = append(found, rec)
		case errors.Is(err, server.ErrRecordNotFound):
		default:
			failed = err
		}
	}
	if failed != nil {
		if r.Context().Err() == nil {
			h.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "idemkit/server/keystatus: store read failed", slog.Any("err", failed))
		}
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable, "The idempotency store could not be read; try again.")
		return
	}
	if len(found) > 1 {
		writeProblem(w, http.StatusBadRequest, wire.ProblemEndpointInvalid,
			"The key has records under more than one operation; name the operation with the endpoint parameter.")
		return
	}
	a := Answer{Key: key, Status: StatusUnknown}
	if len(found) == 1 {
		a = h.answer(r, found[0], now)
	}
	body, err := json.Marshal(a)
	if err != nil { // an http.Header of strings always marshals
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemStoreUnavailable, "The record could not be encoded.")
		return
	}
	body = append(body, '\n')
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// get is Store.Get bounded by StoreTimeout.
func (h *Handler) get(ctx context.Context, s server.Scope, now time.Time) (*server.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	defer cancel()
	return h.store.Get(ctx, s, now)
}

// answer describes the caller's own record rec.
func (h *Handler) answer(r *http.Request, rec *server.Record, now time.Time) Answer {
	a := Answer{Key: rec.Key, Endpoint: rec.Endpoint}
	if !rec.CreatedAt.IsZero() {
		a.CreatedAt = rec.CreatedAt.UTC().Format(time.RFC3339)
	}
	if rec.State != server.StateCompleted || rec.Response == nil {
		age := max(int64(now.Sub(rec.CreatedAt)/time.Second), 0)
		a.Status, a.AgeSeconds = StatusInProgress, &age
		return a
	}
	a.Status, a.ResponseStatus = StatusCompleted, rec.Response.Status
	if h.cfg.ShowResponseFunc != nil && h.cfg.ShowResponseFunc(r, rec.Scope, rec.Response) {
		hd := rec.Response.Header.Clone()
		if hd == nil {
			hd = http.Header{}
		}
		a.Response = &Response{Status: rec.Response.Status, Headers: hd,
			BodyBase64: base64.StdEncoding.EncodeToString(rec.Response.Body), BodyOmitted: rec.Response.BodyOmitted}
	}
	return a
}

// pathKey returns the {key} path value, or else the last segment of the
// path, unescaped.
func pathKey(r *http.Request) (string, error) {
	if k := r.PathValue("key"); k != "" {
		return k, nil
	}
	p := r.URL.EscapedPath()
	seg := p[strings.LastIndexByte(p, '/')+1:]
	k, err := url.PathUnescape(seg)
	if err != nil {
		return "", &wire.KeyError{Reason: "the path segment is not validly escaped"}
	}
	return k, nil
}

// validScopePart is the middleware's check of a principal or an operation
// name: non-empty, at most maxScopePartBytes, valid UTF-8, no control
// characters.
func validScopePart(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > maxScopePartBytes:
		return fmt.Errorf("longer than %d bytes", maxScopePartBytes)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("contains a control character")
	}
	return nil
}
