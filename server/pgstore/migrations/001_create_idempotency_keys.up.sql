-- idempotency_keys holds one row per scope (principal, endpoint, key). The
-- primary key is the concurrency control: every claim is a single
-- INSERT ... ON CONFLICT on it.
CREATE TABLE idempotency_keys (
    principal             text        NOT NULL,
    endpoint              text        NOT NULL,
    key                   text        NOT NULL,
    state                 text        NOT NULL CHECK (state IN ('in_progress', 'completed')),
    -- SHA-256 of the canonical request, never the request itself.
    fingerprint           bytea       NOT NULL,
    fingerprint_version   integer     NOT NULL,
    -- Fencing token: 1 on insert, +1 on every overwrite or takeover.
    token                 bigint      NOT NULL,
    -- Lease end while state is in_progress; NULL once completed.
    locked_until          timestamptz,
    response_status       smallint,
    response_headers      jsonb,
    -- Byte for byte, never jsonb: a replay must be identical.
    response_body         bytea,
    response_body_omitted boolean     NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL,
    completed_at          timestamptz,
    expires_at            timestamptz NOT NULL,
    PRIMARY KEY (principal, endpoint, key)
);

-- Sweep is an index range scan over expires_at, deleted in chunks.
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- In-progress rows are a vanishing fraction of the table; finding stale
-- leases must not scan the whole table.
CREATE INDEX idempotency_keys_in_progress_idx ON idempotency_keys (locked_until)
    WHERE state = 'in_progress';
