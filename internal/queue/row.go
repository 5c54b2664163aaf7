package queue

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idemkit/internal/policy"
	"github.com/idemkit/idemkit/internal/wire"
)

// Queue rows: an intent as the idemkit_intents table stores it, and its
// decoding, which never trusts the file: anything it cannot make sense of
// is a Corrupt Error.

// row is one intents row as scanned, before decoding.
type row struct {
	id, key, state, method, url, host string
	header                            []byte
	body, fp                          []byte
	attempts                          int64
	nextAttemptAt                     string
	firstAttemptAt, horizon           *string
	leaseToken                        int64
	outcomeStatus                     *int64
	outcomeHeader                     []byte
	outcomeBody                       []byte
	outcomeReplayed                   *int64
	outcomeKeyReused                  int64
	lastError                         string
	createdAt, updatedAt              string
	instance                          *string
	credentialHeaders                 *string
	leasedUntil                       *string
	unanswered                        *int64
	leaseOwner                        *string
	keyForm                           *string
}

// rowColumns lists the columns scanned into a row, in scan order.
const rowColumns = `id, key, state, method, url, host, header, body, fingerprint, attempts,
	next_attempt_at, first_attempt_at, horizon, lease_token, outcome_status, outcome_header,
	outcome_body, outcome_replayed, outcome_key_reused, last_error, created_at, updated_at, instance,
	credential_headers, leased_until, lease_owner, key_form,
	(SELECT MIN(a.n) FROM idemkit_attempts a WHERE a.intent_id = idemkit_intents.id AND a.status IS NULL AND a.not_sent = 0)`

type scanner interface{ Scan(dest ...any) error }

func scanRow(s scanner) (*row, error) {
	r := &row{}
	err := s.Scan(&r.id, &r.key, &r.state, &r.method, &r.url, &r.host, &r.header, &r.body, &r.fp,
		&r.attempts, &r.nextAttemptAt, &r.firstAttemptAt, &r.horizon, &r.leaseToken, &r.outcomeStatus,
		&r.outcomeHeader, &r.outcomeBody, &r.outcomeReplayed, &r.outcomeKeyReused, &r.lastError, &r.createdAt, &r.updatedAt, &r.instance,
		&r.credentialHeaders, &r.leasedUntil, &r.leaseOwner, &r.keyForm, &r.unanswered)
	return r, err
}

// decodeIntent turns a stored row into an Intent. Anything it cannot make
// sense of is a Corrupt Error, never a panic.
func decodeIntent(r *row) (*Intent, error) {
	bad := func(what string, err error) error {
		if err != nil {
			return Errorf(Corrupt, "intent %q: %s: %w", r.id, what, err)
		}
		return Errorf(Corrupt, "intent %q: %s", r.id, what)
	}
	in := &Intent{
		ID: r.id, Key: r.key, State: State(r.state), Method: r.method, URL: r.url,
		Body: r.body, Fingerprint: r.fp, Attempts: int(r.attempts), LastError: r.lastError,
	}
	if r.instance != nil {
		in.Instance = *r.instance
	}
	if r.keyForm != nil {
		in.KeyForm = *r.keyForm
	}
	if r.unanswered != nil {
		in.Unanswered = int(*r.unanswered)
	}
	if r.id == "" {
		return nil, bad("empty id", nil)
	}
	if r.credentialHeaders != nil {
		if err := json.Unmarshal([]byte(*r.credentialHeaders), &in.CredentialHeaders); err != nil {
			return nil, bad("credential_headers", err)
		}
	}
	if !in.State.Valid() {
		return nil, bad(fmt.Sprintf("unknown state %q", r.state), nil)
	}
	if err := policy.ValidateKey(r.key); err != nil {
		return nil, bad("key", err)
	}
	if !wire.ValidToken(r.method) {
		return nil, bad("method", nil)
	}
	if r.attempts < 0 || r.attempts > 1<<31 {
		return nil, bad("attempts out of range", nil)
	}
	if len(r.body) > policy.MaxBodySize {
		return nil, bad("body over the size limit", nil)
	}
	if in.Body == nil {
		in.Body = []byte{}
	}
	h, err := wire.DecodeHeader(r.header)
	if err != nil {
		return nil, bad("header", err)
	}
	in.Header = h
	var t, leasedUntil time.Time
	for _, f := range []struct {
		dst  *time.Time
		src  *string
		name string
	}{
		{&in.NextAttemptAt, &r.nextAttemptAt, "next_attempt_at"},
		{&in.FirstAttemptAt, r.firstAttemptAt, "first_attempt_at"},
		{&in.Horizon, r.horizon, "horizon"},
		{&in.CreatedAt, &r.createdAt, "created_at"},
		{&in.UpdatedAt, &r.updatedAt, "updated_at"},
		{&leasedUntil, r.leasedUntil, "leased_until"},
	} {
		if f.src == nil {
			continue
		}
		if t, err = wire.ParseTime(*f.src); err != nil {
			return nil, bad(f.name, err)
		}
		*f.dst = t
	}
	if leasedUntil.After(in.NextAttemptAt) {
		in.NextAttemptAt = leasedUntil // held: due when the lease ends
	}
	if in.State == Pending {
		in.LeasedUntil = leasedUntil
		if r.leaseOwner != nil && !leasedUntil.IsZero() {
			if o, err := ParseOwner(*r.leaseOwner); err == nil {
				in.HolderPID = o.PID
				in.HolderHost, _, _ = strings.Cut(o.Host, "@") // the hostname, without boot id and pid namespace
			}
		}
	}
	if r.outcomeStatus != nil {
		st := *r.outcomeStatus
		if st < 100 || st > 999 {
			return nil, bad("outcome status out of range", nil)
		}
		oh, err := wire.DecodeHeader(r.outcomeHeader)
		if err != nil {
			return nil, bad("outcome header", err)
		}
		body := r.outcomeBody
		if body == nil {
			body = []byte{}
		}
		in.Outcome = &Outcome{Status: int(st), Header: oh, Body: body,
			Replayed: r.outcomeReplayed != nil && *r.outcomeReplayed != 0, KeyReused: r.outcomeKeyReused != 0}
	}
	return in, nil
}
