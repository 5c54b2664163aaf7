-- payments is the ledger of the example API. Every payment is inserted in
-- the same transaction as the idempotency record of the request that created
-- it (transactional mode), so neither can exist without the other.
--
-- idempotency_key is the key of the creating request. The unique key makes
-- the insert itself idempotent per account: in lease mode, where the payment
-- is written outside the idempotency record's transaction, a retry that
-- takes over an expired lease finds the payment (the INSERT fails with
-- 1062) instead of charging twice.
--
-- account and idempotency_key are VARBINARY, compared byte for byte (the
-- PAD SPACE of utf8mb4_bin would make 'k' and 'k ' one key). created_at is
-- DATETIME(6) in UTC.
CREATE TABLE IF NOT EXISTS payments (
    id              VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    account         VARBINARY(512) NOT NULL,
    amount          BIGINT NOT NULL CHECK (amount > 0),
    currency        CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (currency REGEXP BINARY '^[A-Z]{3}$'),
    description     TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    idempotency_key VARBINARY(255) NOT NULL,
    created_at      DATETIME(6) NOT NULL,
    UNIQUE KEY payments_account_idempotency_key (account, idempotency_key),
    -- GET /v1/payments lists one account's payments, oldest first.
    INDEX payments_account_created_at_idx (account, created_at, id)
) ENGINE = InnoDB DEFAULT CHARACTER SET = utf8mb4 COLLATE = utf8mb4_bin;
