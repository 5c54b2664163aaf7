package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit/server"
)

// claimFresh is the first claim of a transaction, on the transaction's
// connection: a read of the record, before anything is begun, answers a
// completed one (a replay: no lock taken, nothing to roll back); else the
// BEGIN, the timeouts and pgClaimInsert in one round trip acquire a fresh
// scope. A row the insert meets (an expired one, an in-progress claim, a
// race) is not decided here: decided is false, and the caller claims with
// the upsert on the begun transaction, which decides under the row lock.
func (t *pgTx) claimFresh(ctx context.Context, req server.ClaimRequest) (res server.ClaimResult, decided bool, err error) {
	if t.tx != nil {
		return res, false, nil
	}
	rec, err := t.st.tx.Get(ctx, &t.connQ, req.Scope, req.Now)
	switch {
	case err == nil && rec.State == server.StateCompleted:
		return server.ClaimResult{Existing: rec}, true, nil
	case err != nil && !errors.Is(err, server.ErrRecordNotFound):
		return res, true, err
	case t.st.cfg.Partitioned:
		return res, false, nil // the claim function decides, on the begun transaction
	}
	b := t.beginBatch()
	b.Queue(pgClaimInsert, t.st.d.claimArgs(req)...)
	br, err := t.sendBatch(ctx, b, 2)
	if err != nil {
		return res, true, interpretError(err)
	}
	var token int64
	err = br.QueryRow().Scan(&token)
	inserted := err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err = errors.Join(err, br.Close()); err != nil {
		return res, true, interpretError(err)
	}
	if !inserted {
		return res, false, nil
	}
	return server.ClaimResult{Acquired: true, Token: token}, true, nil
}
