package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idemkit/server"
	"github.com/idemkit/idemkit/server/internal/sqlstore"
)

// pgClaimOrReplay is the first claim of a transactional-mode transaction,
// sent with its BEGIN in one round trip. It sets the transaction's timeouts
// first ($9–$11, as pgSetTimeouts does; the materialized CTE feeds the
// insert, so lock_timeout is in force before the insert can wait on a
// concurrent claim; statement_timeout applies from the next statement). It inserts the claim
// of a scope no row holds and returns its token; when a row holds the scope
// it writes and locks nothing, and returns that row's response if it is a
// live completed record (a replay). It returns a row of NULLs otherwise (an
// expired row, an in-progress claim, a row its snapshot does not hold yet),
// which the upsert then decides under the row lock. Its times are now(),
// the start of the transaction it begins.
//
// A new key costs what the batched hand-written POST's claim costs
// ([BEGIN; claim], no read before it) and a replay two round trips (this
// one and the ROLLBACK), as the hand-written [BEGIN; claim], [SELECT;
// COMMIT]. Its row is a recordRow.
const pgClaimOrReplay = `WITH t AS MATERIALIZED (
    SELECT set_config('lock_timeout', $9, true), set_config('statement_timeout', $10, true),
        set_config('idle_in_transaction_session_timeout', $11, true)),
ins AS (
    INSERT INTO idempotency_keys
        (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
    SELECT $1, $2, $3, 'in_progress', $4, $5, 1,
        coalesce($6::timestamptz, now()) + $7::bigint * interval '1 microsecond', coalesce($6::timestamptz, now()),
        coalesce($6::timestamptz, now()) + $8::bigint * interval '1 microsecond'
    FROM t
    ON CONFLICT (principal, endpoint, key) DO NOTHING
    RETURNING token)
SELECT i.token, k.fingerprint, k.fingerprint_version, k.token, k.response_status, k.response_headers,
    k.response_body, k.response_body_omitted, k.created_at, k.expires_at
FROM (SELECT) AS one
LEFT JOIN ins AS i ON true
LEFT JOIN idempotency_keys AS k ON i.token IS NULL
    AND k.principal = $1 AND k.endpoint = $2 AND k.key = $3
    AND k.state = 'completed' AND k.expires_at > coalesce($6::timestamptz, clock_timestamp())`

// recordRow is the row of pgClaimOrReplay and pgClaimLive: the token of
// the claim the statement inserted, or the columns of the record it met
// (NULL when it met none), scanned into types that need no allocation for
// NULL, so that a new key decodes only its token.
type recordRow struct {
	inserted           pgtype.Int8
	reclaimable        pgtype.Bool // pgClaimLive only
	completed          pgtype.Bool // pgClaimLive only: pgClaimOrReplay reads completed records alone
	fingerprint        []byte
	fingerprintVersion pgtype.Int4
	token              pgtype.Int8
	lockedUntil        pgtype.Timestamptz // pgClaimLive only
	status             pgtype.Int2
	headers, body      []byte
	omitted            pgtype.Bool
	created, expires   pgtype.Timestamptz
}

// record is the record of sc that r read.
func (r *recordRow) record(sc server.Scope) (*server.Record, error) {
	rec := &server.Record{
		Scope: sc, State: server.StateInProgress,
		Fingerprint: r.fingerprint, FingerprintVersion: int(r.fingerprintVersion.Int32),
		Token:     r.token.Int64,
		CreatedAt: r.created.Time.UTC(), ExpiresAt: r.expires.Time.UTC(),
	}
	if r.lockedUntil.Valid {
		rec.LockedUntil = r.lockedUntil.Time.UTC()
	}
	if !r.completed.Bool {
		return rec, nil
	}
	rec.State = server.StateCompleted
	h, err := sqlstore.DecodeHeader(r.headers)
	if err != nil {
		return nil, err
	}
	body := r.body
	if len(body) == 0 {
		body = nil
	}
	rec.Response = &server.StoredResponse{Status: int(r.status.Int16), Header: h, Body: body, BodyOmitted: r.omitted.Bool}
	return rec, nil
}

// pgClaimLive is the claim of Store.Claim (lease mode), committed on its
// own: the claim of a fresh scope and the read of an existing one in one
// statement that locks and writes nothing when the row exists, as
// pgClaimOrRead, but whose columns (see recordRow) need no allocation and
// no decoding when it inserts: the inserted token, whether the row it met
// may be claimed anew (reclaimable: expired, or a lapsed lease with this
// request's fingerprint), and that row's columns.
const pgClaimLive = `WITH c AS (SELECT coalesce($6::timestamptz, clock_timestamp()) AS now),
ins AS (
    INSERT INTO idempotency_keys
        (principal, endpoint, key, state, fingerprint, fingerprint_version, token, locked_until, created_at, expires_at)
    SELECT $1, $2, $3, 'in_progress', $4, $5, 1,
        c.now + $7::bigint * interval '1 microsecond', c.now, c.now + $8::bigint * interval '1 microsecond'
    FROM c
    ON CONFLICT (principal, endpoint, key) DO NOTHING
    RETURNING token)
SELECT i.token,
    k.expires_at <= c.now OR (k.state = 'in_progress' AND k.locked_until <= c.now
        AND k.fingerprint = $4 AND k.fingerprint_version = $5),
    k.state = 'completed', k.fingerprint, k.fingerprint_version, k.token, k.locked_until, k.response_status,
    k.response_headers, k.response_body, k.response_body_omitted, k.created_at, k.expires_at
FROM c
LEFT JOIN ins AS i ON true
LEFT JOIN idempotency_keys AS k ON i.token IS NULL AND k.principal = $1 AND k.endpoint = $2 AND k.key = $3`

// claimLive claims req in one statement (pgClaimLive) and reports whether
// that decided: a fresh scope is acquired, a live record that cannot be
// claimed anew is returned. Anything else (an expired row or a lapsed
// lease, which the upsert takes over under the row lock; a row the
// statement's snapshot does not hold yet) is left to the general claim.
func (s *Store) claimLive(ctx context.Context, req server.ClaimRequest) (res server.ClaimResult, decided bool, err error) {
	var r recordRow
	if err := s.pool.QueryRow(ctx, pgClaimLive, s.d.claimArgs(req)...).Scan(&r.inserted, &r.reclaimable,
		&r.completed, &r.fingerprint, &r.fingerprintVersion, &r.token, &r.lockedUntil, &r.status,
		&r.headers, &r.body, &r.omitted, &r.created, &r.expires); err != nil {
		return res, true, interpretError(err)
	}
	switch {
	case r.inserted.Valid:
		return server.ClaimResult{Acquired: true, Token: r.inserted.Int64}, true, nil
	case r.token.Valid && !r.reclaimable.Bool:
		rec, err := r.record(req.Scope)
		return server.ClaimResult{Existing: rec}, true, err
	}
	return res, false, nil
}

// claimFresh is the first claim of a transaction: the BEGIN and
// pgClaimOrReplay (which sets the timeouts) in one round trip, which
// acquire a fresh scope or read a live completed record. Anything else is not decided here: decided
// is false, and the caller claims with the upsert on the begun transaction,
// which decides under the row lock. A partitioned table (whose claim is a
// function) reads a completed record before anything is begun, and leaves
// the rest to that function.
func (t *pgTx) claimFresh(ctx context.Context, req server.ClaimRequest) (res server.ClaimResult, decided bool, err error) {
	if t.tx != nil {
		return res, false, nil
	}
	if t.st.cfg.Partitioned {
		rec, err := t.st.tx.Get(ctx, &t.connQ, req.Scope, req.Now)
		switch {
		case err == nil && rec.State == server.StateCompleted:
			return server.ClaimResult{Existing: rec}, true, nil
		case err != nil && !errors.Is(err, server.ErrRecordNotFound):
			return res, true, err
		}
		return res, false, nil
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(pgClaimOrReplay, t.st.d.claimArgs(req, t.timeouts...)...)
	br, err := t.sendBatch(ctx, b, 1)
	if err != nil {
		return res, true, interpretError(err)
	}
	r := recordRow{completed: pgtype.Bool{Bool: true, Valid: true}}
	err = br.QueryRow().Scan(&r.inserted, &r.fingerprint, &r.fingerprintVersion, &r.token, &r.status,
		&r.headers, &r.body, &r.omitted, &r.created, &r.expires)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return res, true, interpretError(err)
	case r.inserted.Valid:
		return server.ClaimResult{Acquired: true, Token: r.inserted.Int64}, true, nil
	case r.token.Valid:
		rec, err := r.record(req.Scope)
		return server.ClaimResult{Existing: rec}, true, err
	}
	return res, false, nil
}
