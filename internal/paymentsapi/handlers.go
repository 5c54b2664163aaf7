package paymentsapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idemkit/internal/wire"
	"github.com/idemkit/idemkit/server"
)

// MaxBodyBytes is the largest payment request body the API accepts: a
// larger one is answered 413 body-too-large by the idempotency middleware
// before more of it is read or anything is claimed.
const MaxBodyBytes = 16 << 10

// handlers are the payments API's HTTP handlers.
type handlers struct {
	ledger ledger
	logger *slog.Logger
	// delay holds every create handler this long before the insert;
	// delayAfter this long after it, before the answer.
	delay, delayAfter time.Duration
	// abortOnDisconnect makes the create handler give up (and roll back)
	// when the client goes away. By default it finishes the payment anyway,
	// like a real server that cannot tell a lost client from a slow one.
	abortOnDisconnect bool
	// stopping is canceled when the server shuts down: handlers in their
	// delay give up with 503, so that nothing half-done is committed.
	stopping context.Context

	timeNowFunc func() time.Time
	newIDFunc   func() (string, error)
	// onChargeStart, if set, is called when a create handler is about to
	// make its payment (Config.OnChargeStartFunc).
	onChargeStart func(account, key string)
	// onChargeMade, if set, is called when a create handler has made its
	// payment (Config.OnChargeMadeFunc).
	onChargeMade func(account, key string)
}

func newPaymentID() (string, error) {
	// Version 7: ids made later sort later, which breaks created_at ties.
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return "pay_" + u.String(), nil
}

// routes returns the API: POST /v1/payments protected by mw, GET
// /v1/payments, and the key status lookup at LookupPattern.
func (h *handlers) routes(mw *server.Middleware, lookup http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/payments", mw.Wrap(server.LimitBody(http.HandlerFunc(h.create), MaxBodyBytes)))
	mux.HandleFunc("GET /v1/payments", h.list)
	mux.Handle(LookupPattern, lookup)
	return mux
}

// create is POST /v1/payments. The middleware has claimed the key; in
// transactional mode the request context carries the transaction that the
// payment, the claim and the stored response commit in.
func (h *handlers) create(w http.ResponseWriter, r *http.Request) {
	scope, ok := server.ScopeFromContext(r.Context())
	if !ok {
		writeProblem(w, http.StatusInternalServerError, problemInternal, "Internal server error", "The payment handler ran without the idempotency middleware.", 0)
		return
	}
	req, err := decodePayment(r.Body)
	if err != nil {
		// Nothing happened: not stored, so a corrected retry with the same
		// key is processed.
		server.MarkNotStored(r.Context())
		writeProblem(w, http.StatusBadRequest, problemInvalidPayment, "Invalid payment", err.Error(), 0)
		return
	}

	ctx, done := h.effectContext(r)
	defer done()
	if h.onChargeStart != nil {
		h.onChargeStart(scope.Principal, scope.Key)
	}
	if h.delay > 0 {
		t := time.NewTimer(h.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			// A 5xx: the middleware rolls back (transactional mode) or
			// releases the claim (lease mode), so a retry runs afresh.
			writeProblem(w, http.StatusServiceUnavailable, problemShuttingDown, "Server shutting down",
				"The payment was not made. Retry with the same Idempotency-Key.", 1)
			return
		}
	}

	id, err := h.newIDFunc()
	if err != nil {
		h.internalError(w, r, "mint payment id", err)
		return
	}
	p, err := h.ledger.create(ctx, Payment{
		ID:          id,
		Account:     scope.Principal,
		Amount:      req.Amount,
		Currency:    req.Currency,
		Description: req.Description,
		CreatedAt:   h.timeNowFunc().UTC().Truncate(time.Millisecond),
	}, scope.Key)
	switch {
	case errors.Is(err, errKeyReused):
		writeProblem(w, http.StatusUnprocessableEntity, wire.ProblemKeyReused, "Idempotency-Key reused with a different request",
			"This account already made a different payment with this Idempotency-Key.", 0)
		return
	case err != nil && h.mayHaveCommitted(ctx, err):
		// Lease mode: the payment's INSERT commits on its own, and its
		// answer was lost after it may have been applied. Never say "not
		// made" without knowing: the 503 frees the key, and the retry's
		// INSERT finds the payment (by its key) if it was made.
		h.logger.LogAttrs(r.Context(), slog.LevelWarn, "payments: create payment: outcome unknown", slog.Any("error", err))
		writeProblem(w, http.StatusServiceUnavailable, wire.ProblemOutcomeUnknown, wire.ProblemTitle(wire.ProblemOutcomeUnknown),
			"The payment may or may not have been made: the database's answer was lost. Retry with the same Idempotency-Key: the retry finds out.", 1)
		return
	case err != nil:
		h.internalError(w, r, "create payment", err)
		return
	}
	if h.onChargeMade != nil {
		h.onChargeMade(scope.Principal, scope.Key)
	}
	if h.delayAfter > 0 {
		// The payment is made: whatever happens now, the answer says so
		// (a shutdown does not cut this wait short).
		t := time.NewTimer(h.delayAfter)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	writeStored(w, paymentResponse(p))
}

// mayHaveCommitted reports whether the payment write that failed with err
// may have been applied anyway: never inside the request's transaction
// (transactional mode), which rolls back with the 5xx; in lease mode, when
// the driver cannot say the write was not sent.
func (h *handlers) mayHaveCommitted(ctx context.Context, err error) bool {
	if _, inTx := server.TxHandle(ctx); inTx {
		return false
	}
	return h.ledger.d.mayHaveCommitted(err)
}

// effectContext returns the context the payment is made under: the
// request's (with its values, such as the transaction), not canceled when
// the client goes away unless abortOnDisconnect is set, and canceled when
// the server shuts down.
func (h *handlers) effectContext(r *http.Request) (context.Context, context.CancelFunc) {
	base := r.Context()
	if !h.abortOnDisconnect {
		base = context.WithoutCancel(base)
	}
	ctx, cancel := context.WithCancel(base)
	stop := context.AfterFunc(h.stopping, cancel)
	return ctx, func() { stop(); cancel() }
}

// list is GET /v1/payments: the caller's payments, oldest first.
func (h *handlers) list(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	account, err := bearerAccount(r)
	if err != nil {
		writeProblem(w, http.StatusUnauthorized, wire.ProblemUnauthenticated, "Unauthenticated", err.Error(), 0)
		h.logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("outcome", "rejected"), slog.Int("status", http.StatusUnauthorized))
		return
	}
	ps, err := h.ledger.list(r.Context(), account)
	if err != nil {
		h.internalError(w, r, "list payments", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Payments []Payment `json:"payments"`
	}{ps})
	h.logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("principal", account), slog.String("outcome", "listed"),
		slog.Int("status", http.StatusOK), slog.Int("payments", len(ps)),
		slog.Duration("duration", time.Since(start)))
}

func (h *handlers) internalError(w http.ResponseWriter, r *http.Request, op string, err error) {
	h.logger.LogAttrs(r.Context(), slog.LevelError, "payments: "+op+" failed", slog.Any("error", err))
	writeProblem(w, http.StatusInternalServerError, problemInternal, "Internal server error",
		"The payment was not made. Retry with the same Idempotency-Key.", 0)
}

// logEvent is the middleware's OnEventFunc: one line per POST.
func (h *handlers) logEvent(r *http.Request, e server.Event) {
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("key", e.Scope.Key),
		slog.String("principal", e.Scope.Principal),
		slog.String("outcome", string(e.Outcome)),
		slog.Int("status", e.Status),
		slog.Duration("duration", e.Duration),
	}
	if e.Token > 0 {
		attrs = append(attrs, slog.Int64("token", e.Token))
	}
	if e.TakenOver {
		attrs = append(attrs, slog.Bool("taken_over", true))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	h.logger.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelInfo, "request", attrs...)
}
