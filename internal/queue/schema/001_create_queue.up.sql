-- The client queue. Timestamps are RFC 3339 UTC text with milliseconds
-- (fixed width, so they compare as strings).

CREATE TABLE IF NOT EXISTS idemkit_intents (
    id               TEXT    PRIMARY KEY,
    key              TEXT    NOT NULL UNIQUE,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed', 'expired', 'canceled')),
    method           TEXT    NOT NULL,
    url              TEXT    NOT NULL,
    host             TEXT    NOT NULL,           -- scheme://host[:port], the key of idemkit_hosts
    header           BLOB    NOT NULL,           -- JSON, never credential headers
    body             BLOB    NOT NULL,
    fingerprint      BLOB    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT    NOT NULL,           -- due time; while leased: the lease end
    first_attempt_at TEXT,
    horizon          TEXT,                       -- only ever moves earlier
    lease_token      INTEGER NOT NULL DEFAULT 0, -- fencing token, +1 per claim
    outcome_status   INTEGER,
    outcome_header   BLOB,
    outcome_body     BLOB,
    outcome_replayed INTEGER,
    last_error       TEXT    NOT NULL DEFAULT '',
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL
) STRICT;

-- The due lookup: pending intents by next attempt time. Partial, so terminal
-- intents (the bulk of a long-lived queue) cost it nothing.
CREATE INDEX IF NOT EXISTS idemkit_intents_due ON idemkit_intents (next_attempt_at) WHERE state = 'pending';

-- Prune and "updated since" listings of terminal intents.
CREATE INDEX IF NOT EXISTS idemkit_intents_terminal ON idemkit_intents (updated_at) WHERE state <> 'pending';

CREATE TABLE IF NOT EXISTS idemkit_attempts (
    intent_id   TEXT    NOT NULL,
    n           INTEGER NOT NULL,
    token       INTEGER NOT NULL,
    started_at  TEXT    NOT NULL,
    finished_at TEXT,
    status      INTEGER,
    error       TEXT    NOT NULL DEFAULT '',
    replayed    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (intent_id, n)
) STRICT, WITHOUT ROWID;

-- The Idempotency-Window each host advertised, remembered across restarts.
CREATE TABLE IF NOT EXISTS idemkit_hosts (
    host           TEXT    PRIMARY KEY,
    window_seconds INTEGER NOT NULL CHECK (window_seconds > 0),
    updated_at     TEXT    NOT NULL
) STRICT;
