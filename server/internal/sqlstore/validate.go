package sqlstore

import (
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/server"
)

// ValidateScope returns an error naming the empty field of s.
func ValidateScope(s server.Scope) error {
	switch {
	case s.Principal == "":
		return errors.New("idemkit/server: Scope.Principal is empty")
	case s.Endpoint == "":
		return errors.New("idemkit/server: Scope.Endpoint is empty")
	case s.Key == "":
		return errors.New("idemkit/server: Scope.Key is empty")
	}
	return nil
}

// ValidateClaimRequest returns an error naming the first invalid field of req.
func ValidateClaimRequest(req server.ClaimRequest) error {
	if err := ValidateScope(req.Scope); err != nil {
		return err
	}
	switch {
	case len(req.Fingerprint) == 0:
		return errors.New("idemkit/server: ClaimRequest.Fingerprint is empty")
	case req.Now.IsZero():
		return errors.New("idemkit/server: ClaimRequest.Now is zero")
	case !req.ExpiresAt.After(req.Now):
		return errors.New("idemkit/server: ClaimRequest.ExpiresAt must be after Now")
	case req.LockedUntil.IsZero():
		return errors.New("idemkit/server: ClaimRequest.LockedUntil is zero")
	}
	return nil
}

// validateResponse returns an error if resp cannot be stored.
func validateResponse(resp *server.StoredResponse) error {
	switch {
	case resp == nil:
		return errors.New("idemkit/server: StoredResponse is nil")
	case resp.Status < 100 || resp.Status > 999:
		return fmt.Errorf("idemkit/server: StoredResponse.Status %d is not an HTTP status", resp.Status)
	}
	return nil
}

// claimAttemptsMax bounds how often a claim is retried when the live row
// that blocked it vanished (released) before it could be read.
const claimAttemptsMax = 4

// errClaimRetriesExhausted is wrapped in ErrStoreBusy when a scope keeps
// changing under a claim.
var errClaimRetriesExhausted = fmt.Errorf("claim of a scope that kept changing gave up after %d attempts", claimAttemptsMax)
