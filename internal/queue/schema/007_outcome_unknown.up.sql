-- The state "unknown", and the key's form on the wire (key_form).
--
-- The state "unknown": an answer that says nothing about the request (a
-- 401, a proxy's error page, a 409 nobody can classify) came after an
-- attempt whose answer was lost. The effect may have happened: the intent
-- is not failed, and is never resent under a new key without an explicit
-- override (see intent.go). SQLite cannot change a CHECK constraint in
-- place: the table is rebuilt, with its indexes and triggers.
CREATE TABLE idemkit_intents_007 (
    id                 TEXT    PRIMARY KEY,
    key                TEXT    NOT NULL UNIQUE,
    state              TEXT    NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed', 'unknown', 'expired', 'canceled')),
    method             TEXT    NOT NULL,
    url                TEXT    NOT NULL,
    host               TEXT    NOT NULL,           -- scheme://host[:port], the key of idemkit_hosts
    header             BLOB    NOT NULL,           -- JSON, never credential headers
    body               BLOB    NOT NULL,
    fingerprint        BLOB    NOT NULL,
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at    TEXT    NOT NULL,           -- due time (see leased_until)
    first_attempt_at   TEXT,
    horizon            TEXT,                       -- only ever moves earlier
    lease_token        INTEGER NOT NULL DEFAULT 0, -- fencing token, +1 per claim
    outcome_status     INTEGER,
    outcome_header     BLOB,
    outcome_body       BLOB,
    outcome_replayed   INTEGER,
    last_error         TEXT    NOT NULL DEFAULT '',
    created_at         TEXT    NOT NULL,
    updated_at         TEXT    NOT NULL,
    lease_owner        TEXT,
    outcome_key_reused INTEGER NOT NULL DEFAULT 0,
    instance           TEXT,
    credential_headers TEXT,
    leased_until       TEXT,
    -- How the key travels in its header ('bare' or 'quoted', an RFC 8941
    -- sf-string), fixed at the first attempt of this schema: every later
    -- attempt sends the same bytes, so a server that stores the header
    -- value verbatim sees one key. NULL: not sent since 007.
    key_form           TEXT    CHECK (key_form IN ('bare', 'quoted'))
) STRICT;

INSERT INTO idemkit_intents_007 (id, key, state, method, url, host, header, body, fingerprint, attempts,
    next_attempt_at, first_attempt_at, horizon, lease_token, outcome_status, outcome_header, outcome_body,
    outcome_replayed, last_error, created_at, updated_at, lease_owner, outcome_key_reused, instance,
    credential_headers, leased_until)
SELECT id, key, state, method, url, host, header, body, fingerprint, attempts,
    next_attempt_at, first_attempt_at, horizon, lease_token, outcome_status, outcome_header, outcome_body,
    outcome_replayed, last_error, created_at, updated_at, lease_owner, outcome_key_reused, instance,
    credential_headers, leased_until
FROM idemkit_intents;

DROP TABLE idemkit_intents;
ALTER TABLE idemkit_intents_007 RENAME TO idemkit_intents;

CREATE INDEX IF NOT EXISTS idemkit_intents_due ON idemkit_intents (next_attempt_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS idemkit_intents_terminal ON idemkit_intents (updated_at) WHERE state <> 'pending';
CREATE INDEX IF NOT EXISTS idemkit_intents_leased ON idemkit_intents (lease_owner)
    WHERE state = 'pending' AND lease_owner IS NOT NULL;

CREATE TRIGGER IF NOT EXISTS idemkit_intents_owner_fenced
AFTER UPDATE OF lease_token ON idemkit_intents
WHEN NEW.lease_token <> OLD.lease_token AND NEW.lease_owner IS OLD.lease_owner AND OLD.lease_owner IS NOT NULL
BEGIN
    UPDATE idemkit_intents SET lease_owner = NULL WHERE id = NEW.id;
END;

CREATE TRIGGER IF NOT EXISTS idemkit_intents_lease_held
BEFORE UPDATE OF lease_token ON idemkit_intents
WHEN NEW.lease_token <> OLD.lease_token AND OLD.leased_until IS NOT NULL AND OLD.leased_until > NEW.updated_at
BEGIN
    SELECT RAISE(ABORT, 'idemkit: the intent is leased (leased_until): a client older than queue schema 6 cannot claim it; upgrade it');
END;

-- The queue's generation: +1 at every first attempt of an intent. The
-- client also writes it to a file next to the queue (<queue>-generation);
-- a queue file whose generation is behind that file's was restored from an
-- older copy (see instance.go).
ALTER TABLE idemkit_instance ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

-- Whether an attempt is known never to have left this process (the
-- connection was refused, a send hook refused it, the client closed before
-- sending): its missing answer hides nothing. Other attempts without a
-- status (a timeout, a reset, an interrupted process) may have reached the
-- server: their answer was lost.
ALTER TABLE idemkit_attempts ADD COLUMN not_sent INTEGER NOT NULL DEFAULT 0;
