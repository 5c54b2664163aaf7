-- idempotency_keys holds one row per scope (principal, endpoint, key). The
-- primary key is the concurrency control: every claim is a single
-- INSERT ... ON CONFLICT on it.
--
-- Timestamps are fixed-width RFC 3339 UTC text with milliseconds
-- (2006-01-02T15:04:05.000Z), so that text order is time order.
CREATE TABLE idempotency_keys (
    principal             TEXT    NOT NULL,
    endpoint              TEXT    NOT NULL,
    key                   TEXT    NOT NULL,
    state                 TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed')),
    -- SHA-256 of the canonical request, never the request itself.
    fingerprint           BLOB    NOT NULL,
    fingerprint_version   INTEGER NOT NULL,
    -- Fencing token: 1 on insert, +1 on every overwrite or takeover.
    token                 INTEGER NOT NULL,
    -- Lease end while state is in_progress; NULL once completed.
    locked_until          TEXT,
    response_status       INTEGER,
    -- JSON object: header name -> list of values.
    response_headers      TEXT,
    -- Byte for byte: a replay must be identical.
    response_body         BLOB,
    response_body_omitted INTEGER NOT NULL DEFAULT 0 CHECK (response_body_omitted IN (0, 1)),
    created_at            TEXT    NOT NULL,
    completed_at          TEXT,
    expires_at            TEXT    NOT NULL,
    PRIMARY KEY (principal, endpoint, key)
) STRICT;

-- Sweep is an index range scan over expires_at, deleted in chunks.
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);

-- In-progress rows are a vanishing fraction of the table; finding stale
-- leases must not scan the whole table.
CREATE INDEX idempotency_keys_in_progress_idx ON idempotency_keys (locked_until)
    WHERE state = 'in_progress';
