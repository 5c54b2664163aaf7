// Package sqlstore is the one implementation of server.Store over SQL: the
// claim and its retries, record decoding, the compare-and-set completions,
// sweeping in chunks and validation, written once against a Dialect (the
// statements, time codec and error translation of one database) and a
// Querier (the driver). The driver packages server/pgstore and
// server/sqlitestore wrap it; a MySQL store would be a Dialect (one file of
// statements plus its error translation) and a driver package.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/server"
)

// Store implements the operations of server.Store on any Querier of one
// Dialect. Driver packages decide on which Querier each runs (a pool, a
// connection holding a lock, a transaction).
type Store struct {
	d      Dialect
	layout string
	fast   ClaimReader // nil without the capability
	// SweepChunkSize is the largest number of rows one statement of Sweep
	// deletes.
	SweepChunkSize int
	// SweepPaced makes Sweep pause after each full chunk for as long as the
	// chunk took, so that a sweep of many rows takes at most half of the
	// time of one connection and leaves the rest of the database's CPU and
	// WAL flushes to the claims.
	SweepPaced bool
}

// New returns a Store of dialect d whose Sweep deletes chunkSize rows per
// statement.
func New(d Dialect, chunkSize int) *Store {
	s := &Store{d: d, layout: d.TimeLayout(), SweepChunkSize: chunkSize}
	s.fast, _ = d.(ClaimReader)
	return s
}

// Claim implements server.Store.Claim on q. With a ClaimReader dialect a
// fresh scope is claimed, and a live record read, by one statement that
// locks nothing; only an expired row or a lapsed lease takes the Claim
// statement, which decides under the row lock.
func (s *Store) Claim(ctx context.Context, q Querier, req server.ClaimRequest) (server.ClaimResult, error) {
	if err := ValidateClaimRequest(req); err != nil {
		return server.ClaimResult{}, err
	}
	for range claimAttemptsMax {
		if s.fast != nil {
			var (
				sr                    recordScan
				inserted, reclaimable bool
			)
			query, args := s.fast.ClaimOrRead(req)
			err := s.d.InterpretError(q.QueryRow(ctx, query, args...).Scan(sr.dest(s.layout, &inserted, &reclaimable)...))
			switch {
			case errors.Is(err, server.ErrRecordNotFound):
				continue // the conflicting row is not in this statement's snapshot yet, or was deleted: again
			case err != nil:
				return server.ClaimResult{}, err
			case inserted:
				return server.ClaimResult{Acquired: true, Token: sr.rec.Token}, nil
			case !reclaimable:
				rec, err := sr.record(s.layout)
				if err != nil {
					return server.ClaimResult{}, err
				}
				return server.ClaimResult{Existing: rec}, nil
			}
		}
		var (
			token int64
			kept  bool // created_at is not the claim's time: kept by a takeover
		)
		query, args := s.d.Claim(req)
		err := q.QueryRow(ctx, query, args...).Scan(&token, &kept)
		if err == nil {
			return server.ClaimResult{Acquired: true, Token: token, TakenOver: token > 1 && kept}, nil
		}
		if err := s.d.InterpretError(err); !errors.Is(err, server.ErrRecordNotFound) {
			return server.ClaimResult{}, err
		}
		rec, err := s.Get(ctx, q, req.Scope, req.Now)
		if errors.Is(err, server.ErrRecordNotFound) {
			continue // released between the claim and the read: claim again
		}
		if err != nil {
			return server.ClaimResult{}, err
		}
		return server.ClaimResult{Existing: rec}, nil
	}
	return server.ClaimResult{}, fmt.Errorf("%w: %w", server.ErrStoreBusy, errClaimRetriesExhausted)
}

// Get implements server.Store.Get on q.
func (s *Store) Get(ctx context.Context, q Querier, sc server.Scope, now time.Time) (*server.Record, error) {
	if err := ValidateScope(sc); err != nil {
		return nil, err
	}
	var sr recordScan
	query, args := s.d.Get(sc, now)
	if err := q.QueryRow(ctx, query, args...).Scan(sr.dest(s.layout)...); err != nil {
		return nil, s.d.InterpretError(err)
	}
	return sr.record(s.layout)
}

// CompleteStatement checks a completion and returns its statement.
func (s *Store) CompleteStatement(sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) (string, []any, error) {
	if err := ValidateScope(sc); err != nil {
		return "", nil, err
	}
	if err := validateResponse(resp); err != nil {
		return "", nil, err
	}
	headers, err := EncodeHeader(resp.Header)
	if err != nil {
		return "", nil, err
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	query, args := s.d.Complete(sc, token, now, EncodedResponse{Status: resp.Status, Header: headers, Body: body, Omitted: resp.BodyOmitted})
	return query, args, nil
}

// Complete implements server.Store.Complete on q.
func (s *Store) Complete(ctx context.Context, q Querier, sc server.Scope, token int64, now time.Time, resp *server.StoredResponse) error {
	query, args, err := s.CompleteStatement(sc, token, now, resp)
	if err != nil {
		return err
	}
	return s.expectOneRow(q.Exec(ctx, query, args...))
}

// Release implements server.Store.Release on q.
func (s *Store) Release(ctx context.Context, q Querier, sc server.Scope, token int64) error {
	if err := ValidateScope(sc); err != nil {
		return err
	}
	query, args := s.d.Release(sc, token)
	return s.expectOneRow(q.Exec(ctx, query, args...))
}

// ExtendLease implements server.Store.ExtendLease on q.
func (s *Store) ExtendLease(ctx context.Context, q Querier, sc server.Scope, token int64, now time.Time, lease time.Duration) error {
	if err := ValidateScope(sc); err != nil {
		return err
	}
	query, args := s.d.ExtendLease(sc, token, now, lease)
	return s.expectOneRow(q.Exec(ctx, query, args...))
}

// expectOneRow turns a compare-and-set that changed no row into
// server.ErrLeaseLost.
func (s *Store) expectOneRow(n int64, err error) error {
	if err != nil {
		return s.d.InterpretError(err)
	}
	if n == 0 {
		return server.ErrLeaseLost
	}
	return nil
}

// Sweep implements server.Store.Sweep on q: chunks of SweepChunkSize rows,
// each its own statement, until a chunk is short. Rows expired less than
// server.SweepGrace before now are kept: the dialect's SweepChunk is given
// now minus the grace. ctx is checked between chunks and cancels the
// running chunk; rows deleted by earlier chunks stay deleted and are
// counted in the returned total, which comes with ctx's error.
func (s *Store) Sweep(ctx context.Context, q Querier, now time.Time) (int, error) {
	now = now.Add(-server.SweepGrace)
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		query, args := s.d.SweepChunk(now, s.SweepChunkSize)
		start := time.Now()
		n, err := q.Exec(ctx, query, args...)
		if err != nil {
			return total, s.d.InterpretError(err)
		}
		total += int(n)
		if int(n) < s.SweepChunkSize {
			return total, nil
		}
		if s.SweepPaced {
			if err := pause(ctx, time.Since(start)); err != nil {
				return total, err
			}
		}
	}
}

// pause waits for d or until ctx ends, and returns ctx's error if it ended.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PrincipalUsage returns the usage of principal at now, on q.
func (s *Store) PrincipalUsage(ctx context.Context, q Querier, principal string, now time.Time) (server.PrincipalUsage, error) {
	var (
		u      server.PrincipalUsage
		oldest timeCol
	)
	query, args := s.d.Usage(principal, now)
	if err := q.QueryRow(ctx, query, args...).Scan(&u.Keys, &u.StoredBytes, oldest.nullDest(s.layout)); err != nil {
		return server.PrincipalUsage{}, s.d.InterpretError(err)
	}
	t, err := oldest.time(s.layout)
	if err != nil {
		return server.PrincipalUsage{}, err
	}
	u.OldestExpiresAt = t
	return u, nil
}

// Stats returns the size of the store at now, on q.
func (s *Store) Stats(ctx context.Context, q Querier, now time.Time) (server.StoreStats, error) {
	var (
		st     server.StoreStats
		oldest timeCol
	)
	query, args := s.d.Stats(now)
	if err := q.QueryRow(ctx, query, args...).Scan(&st.Rows, &st.Expired, &st.InProgress, oldest.nullDest(s.layout)); err != nil {
		return server.StoreStats{}, s.d.InterpretError(err)
	}
	t, err := oldest.time(s.layout)
	if err != nil {
		return server.StoreStats{}, err
	}
	st.OldestCreatedAt = t
	return st, nil
}

// recordScan receives the RecordColumns of one row.
type recordScan struct {
	rec                           server.Record
	state                         string
	lockedUntil, created, expires timeCol
	status                        *int64
	headers                       []byte
	body                          []byte
	omitted                       bool
}

func (sr *recordScan) dest(layout string, extra ...any) []any {
	return append(extra, &sr.rec.Principal, &sr.rec.Endpoint, &sr.rec.Key, &sr.state, &sr.rec.Fingerprint,
		&sr.rec.FingerprintVersion, &sr.rec.Token, sr.lockedUntil.nullDest(layout), &sr.status, &sr.headers, &sr.body,
		&sr.omitted, sr.created.dest(layout), sr.expires.dest(layout))
}

func (sr *recordScan) record(layout string) (*server.Record, error) {
	rec := sr.rec
	rec.State = server.State(sr.state)
	var err error
	if rec.CreatedAt, err = sr.created.time(layout); err != nil {
		return nil, err
	}
	if rec.ExpiresAt, err = sr.expires.time(layout); err != nil {
		return nil, err
	}
	if rec.LockedUntil, err = sr.lockedUntil.time(layout); err != nil {
		return nil, err
	}
	if rec.State == server.StateCompleted {
		h, err := DecodeHeader(sr.headers)
		if err != nil {
			return nil, err
		}
		body := sr.body
		if len(body) == 0 {
			body = nil
		}
		var st int
		if sr.status != nil {
			st = int(*sr.status)
		}
		rec.Response = &server.StoredResponse{Status: st, Header: h, Body: body, BodyOmitted: sr.omitted}
	}
	return &rec, nil
}

// timeCol receives a timestamp column: a time.Time, or text in the
// dialect's layout.
type timeCol struct {
	t    time.Time
	nt   *time.Time
	s    string
	ns   sql.NullString
	null bool // nullDest was used
}

// dest returns the scan destination of a NOT NULL column.
func (c *timeCol) dest(layout string) any {
	if layout == "" {
		return &c.t
	}
	return &c.s
}

// nullDest returns the scan destination of a nullable column.
func (c *timeCol) nullDest(layout string) any {
	c.null = true
	if layout == "" {
		return &c.nt
	}
	return &c.ns
}

// time returns the scanned time in UTC; zero for NULL.
func (c *timeCol) time(layout string) (time.Time, error) {
	switch {
	case layout == "" && !c.null:
		return c.t.UTC(), nil
	case layout == "":
		if c.nt == nil {
			return time.Time{}, nil
		}
		return c.nt.UTC(), nil
	}
	s := c.s
	if c.null {
		if !c.ns.Valid {
			return time.Time{}, nil
		}
		s = c.ns.String
	}
	t, err := time.Parse(layout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("idemkit/server: stored timestamp %q: %w", s, err)
	}
	return t, nil
}
