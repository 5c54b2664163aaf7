-- idempotency_keys holds one row per scope (principal, endpoint, key). The
-- primary key is the concurrency control: every claim is a plain INSERT on
-- it, and a duplicate-key error (1062) means the scope is taken.
--
-- The scope columns are VARBINARY, compared byte for byte: keys are
-- case-sensitive, and utf8mb4_bin is a PAD SPACE collation on MariaDB (and
-- MySQL 5.7), under which 'k' and 'k ' are one key. Their lengths are the
-- server's limits (512 bytes for principal and endpoint, wire.MaxKeyBytes =
-- 255 for the key): the primary key is at most 1279 bytes, within InnoDB's
-- 3072-byte index limit, so no column is indexed by a prefix.
--
-- Times are DATETIME(6) in UTC (the statements use UTC_TIMESTAMP(6), never
-- the session's time zone): microseconds, and no 2038 limit as TIMESTAMP
-- has.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    principal             VARBINARY(512) NOT NULL,
    endpoint              VARBINARY(512) NOT NULL,
    `key`                 VARBINARY(255) NOT NULL,
    state                 VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    -- SHA-256 of the canonical request, never the request itself.
    fingerprint           VARBINARY(255) NOT NULL,
    fingerprint_version   INT NOT NULL,
    -- Fencing token: 1 on insert, +1 on every overwrite or takeover.
    token                 BIGINT NOT NULL,
    -- Lease end while state is in_progress; NULL once completed.
    locked_until          DATETIME(6) NULL,
    response_status       SMALLINT NULL,
    -- JSON object: header name -> list of values (valid UTF-8 by construction).
    response_headers      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    -- Byte for byte: a replay must be identical.
    response_body         LONGBLOB NULL,
    response_body_omitted BOOLEAN NOT NULL DEFAULT FALSE,
    created_at            DATETIME(6) NOT NULL,
    completed_at          DATETIME(6) NULL,
    expires_at            DATETIME(6) NOT NULL,
    PRIMARY KEY (principal, endpoint, `key`),
    -- Sweep is an index range scan over expires_at, deleted in chunks.
    INDEX idempotency_keys_expires_at_idx (expires_at),
    -- The in-flight lookup. MySQL has no partial index (PostgreSQL's
    -- WHERE state = 'in_progress'); this composite index puts the
    -- in-progress rows, a small fraction of the table, in one contiguous
    -- range ordered by lease end. See the package documentation for the
    -- EXPLAIN, and why not a separate table of in-flight claims.
    INDEX idempotency_keys_state_locked_until_idx (state, locked_until)
) ENGINE = InnoDB DEFAULT CHARACTER SET = utf8mb4 COLLATE = utf8mb4_bin ROW_FORMAT = DYNAMIC;
