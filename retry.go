package idemkit

import (
	"context"
	"net/http"

	"github.com/idemkit/idemkit/internal/policy"
)

// DefaultCheckRetry retries network errors and timeouts, 408, 425, every
// 5xx except 501, and a 409 or 429 that carries a valid Retry-After (the
// server asking to come back later). A 409 or 429 without one is a
// definitive answer unless the host's [Profile] lists it in Retry (the
// idemkit server's in-flight problem, Stripe's idempotency_key_in_use):
// a handler's own "invoice already paid" 409 is not retried for a day. It
// gives up on errors no retry can fix (an unsupported scheme, a bad TLS
// certificate, too many redirects, an invalid header: go-retryablehttp's
// classification) and when ctx ends. Anything else is a
// definitive answer. The Client never calls it for a replayed answer,
// which is always final.
func DefaultCheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	return policy.DefaultCheckRetry(ctx, resp, err)
}
