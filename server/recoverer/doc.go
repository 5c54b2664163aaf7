// Package recoverer finishes lease-mode claims whose holder died, without
// waiting for the client to come back.
//
// In lease mode (server.ModeLease) a claim commits before the handler runs,
// and the handler's effect (a charge at a payment processor) lives outside
// the store. If the process dies between the effect and the completion, the
// record stays in progress: a retry of the same key takes it over once the
// lease lapses, but a client that gave up never retries, and the external
// effect is left made while the record says nothing about it until it
// expires. A Recoverer closes that gap: every Config.Interval it lists the
// in-progress claims whose lease ended at least Config.MinAge ago, takes
// each over exactly as a retry would (a server.Store Claim with the
// record's scope and fingerprint, which fences out the dead holder with a
// new token), and hands it to a RecoverFunc of the application:
//
//	rec, err := recoverer.Start(store, func(ctx context.Context, c recoverer.Claim) (*server.StoredResponse, error) {
//		charge, err := processor.GetByIdempotencyKey(ctx, c.DownstreamKey)
//		switch {
//		case errors.Is(err, processor.ErrNotFound):
//			return nil, nil // never made: release, a retry runs the handler
//		case err != nil:
//			return nil, err // unknown: leave it for a later pass
//		}
//		return renderCharge(charge), nil // the response the handler would have sent
//	}, nil)
//	if err != nil { ... } // recoverer.ErrNoListing: the store cannot list its claims
//	defer rec.Close()
//
// The RecoverFunc asks the downstream what became of the request (a GET
// by Claim.DownstreamKey, or the same POST again with that key, which an
// idempotent processor replays) and returns one of:
//
//   - a response: the recoverer completes the record with it, fenced by
//     its token, and every retry of the key replays it byte for byte;
//   - nil and no error: the effect was never made; the recoverer releases
//     the record, and a retry runs the handler again;
//   - an error: the outcome is still unknown; the recoverer leaves the
//     record in progress, its lease lapses, and a later pass tries again,
//     at most Config.MaxAttempts times.
//
// # Fencing
//
// The takeover is the store's atomic Claim, the same one a client retry
// makes: of several recoverers (one per replica) and client retries that
// race on one lapsed claim, exactly one acquires it; the others see a live
// claim and leave it (OutcomeSkipped, or a 409 for the client). The
// recoverer's completion and release carry its token, so if the
// RecoverFunc outlives Config.Lease and a retry takes the claim over in
// turn, the store refuses the recoverer's late write (server.ErrLeaseLost,
// OutcomeFailed). A live holder, whose heartbeat keeps extending its lease,
// is never touched.
//
// # Stores
//
// The store must list its in-flight claims: pgstore.Store,
// sqlitestore.Store and mysqlstore.Store have InFlight; a wrapper such as
// sealstore.Store is seen through (its Unwrap), while the claims still go
// through the wrapper, which seals the recovered response; with
// sealstore's HashKeys the client's key of a listed claim is gone, and New
// returns ErrKeysHashed. redisstore.Store keeps no index of its in-flight
// claims, so Start and New return ErrNoListing for it.
//
// Claims are recovered one at a time, oldest first; a pass that meets a
// slow downstream takes up to Config.Lease per claim.
//
// # Observing it
//
// Config.OnEventFunc receives one Event per claim a pass looked at;
// Recoverer.Stats sums them, and prommetrics.NewRecovererCollector
// exports them as idemkit_recoverer_* metrics. The log lines hash the key
// and the principal (the form of `idemkit store inflight`).
package recoverer
