package mysqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// Limits of the stored scope, in bytes: the widths of the key columns. The
// server bounds principals and endpoints to 512 bytes and keys to
// wire.MaxKeyBytes (255).
const (
	maxPrincipalBytes   = 512
	maxEndpointBytes    = 512
	maxKeyBytes         = 255
	maxFingerprintBytes = 255
)

// claimAttemptsMax bounds how often a claim starts over when the row that
// blocked it vanished (released, swept) or changed before it could be read.
const claimAttemptsMax = 4

// errClaimRetriesExhausted is wrapped in ErrStoreBusy when a scope keeps
// changing under a claim.
var errClaimRetriesExhausted = fmt.Errorf("idemkit/server/mysqlstore: claim of a scope that kept changing gave up after %d attempts", claimAttemptsMax)

// checkClaim validates req, whose scope and fingerprint must also fit the
// columns: a value that does not fit is refused here rather than sent,
// because a server without STRICT_TRANS_TABLES would truncate it silently,
// merging two scopes into one.
func checkClaim(req server.ClaimRequest) error {
	if err := sqlstore.ValidateClaimRequest(req); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		n    int
		max  int
	}{
		{"Scope.Principal", len(req.Principal), maxPrincipalBytes},
		{"Scope.Endpoint", len(req.Endpoint), maxEndpointBytes},
		{"Scope.Key", len(req.Key), maxKeyBytes},
		{"Fingerprint", len(req.Fingerprint), maxFingerprintBytes},
	} {
		if f.n > f.max {
			return fmt.Errorf("idemkit/server/mysqlstore: ClaimRequest.%s is %d bytes, over the %d the store keeps", f.name, f.n, f.max)
		}
	}
	return nil
}

// claim claims req.Scope on q, the pool (each statement commits on its
// own) or a transaction:
//
//  1. myInsert, a plain INSERT: done, with token 1, unless a row holds the
//     scope, which MySQL answers with a duplicate-key error (1062);
//  2. then the live record is read: a completed one, or an in-progress one
//     of another request, is the answer (a replay costs these two
//     statements and locks nothing);
//  3. an expired row (the read finds none) or an in-progress claim of the
//     same request is handed to myTakeover, which decides under the row
//     lock whether the record expired or the lease ran out, and returns the
//     new token with LAST_INSERT_ID.
//
// A row that vanished or changed between the statements makes the claim
// start over, at most claimAttemptsMax times.
func (s *Store) claim(ctx context.Context, q execer, req server.ClaimRequest) (server.ClaimResult, error) {
	if err := checkClaim(req); err != nil {
		return server.ClaimResult{}, err
	}
	qr := &querier{q: q}
	for range claimAttemptsMax {
		_, err := q.ExecContext(ctx, myInsert, s.d.claimArgs(req)...)
		if err == nil {
			return server.ClaimResult{Acquired: true, Token: 1}, nil
		}
		if !isDuplicate(err) {
			return server.ClaimResult{}, interpretError(err)
		}
		rec, err := s.s.Get(ctx, qr, req.Scope, req.Now)
		var token any // the token the takeover must find, when a live record was read
		switch {
		case errors.Is(err, server.ErrRecordNotFound):
			// The row expired (or was deleted since the INSERT): overwrite it.
		case err != nil:
			return server.ClaimResult{}, err
		case rec.State != server.StateInProgress || string(rec.Fingerprint) != string(req.Fingerprint) ||
			rec.FingerprintVersion != req.FingerprintVersion:
			return server.ClaimResult{Existing: rec}, nil
		default:
			token = rec.Token // the same request: a takeover if its lease ran out
		}
		res, err := q.ExecContext(ctx, myTakeover, s.d.takeoverArgs(req, token)...)
		if err != nil {
			return server.ClaimResult{}, interpretError(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return server.ClaimResult{}, interpretError(err)
		}
		if n == 1 {
			newToken, err := res.LastInsertId()
			if err != nil {
				return server.ClaimResult{}, interpretError(err)
			}
			return server.ClaimResult{Acquired: true, Token: newToken, TakenOver: rec != nil}, nil
		}
		if rec != nil {
			return server.ClaimResult{Existing: rec}, nil // the lease is live
		}
		// The row was deleted, or claimed anew, since the read: again.
	}
	return server.ClaimResult{}, fmt.Errorf("%w: %w", server.ErrStoreBusy, errClaimRetriesExhausted)
}
