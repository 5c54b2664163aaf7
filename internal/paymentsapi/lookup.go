package paymentsapi

import (
	"net/http"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/keystatus"
)

// LookupPattern is where the API mounts the idempotency-key status lookup
// (package server/keystatus): the default path of idemkit's
// Client.Reconcile and `idemkit reconcile`.
const LookupPattern = "GET /v1/idempotency-keys/{key}"

// newLookup is the status lookup of the payments' keys: scoped by the
// middleware's own PrincipalFunc, over the middleware's one scope ("*":
// the payment route names no operation). It shows the stored response
// (the payment's receipt) to its own account, as a replay would: a
// client that lost the answer gets it back without sending the payment
// again.
func newLookup(store server.Store, cfg *Config) (http.Handler, error) {
	return keystatus.New(store, &keystatus.Config{
		PrincipalFunc: bearerAccount,
		Window:        cfg.Window,
		ShowResponseFunc: func(*http.Request, server.Scope, *server.StoredResponse) bool {
			return true
		},
		Logger: cfg.Logger,
	})
}
