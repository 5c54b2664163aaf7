-- payments is the ledger of the example API. Every payment is inserted in
-- the same transaction as the idempotency record of the request that created
-- it (transactional mode), so neither can exist without the other.
--
-- idempotency_key is the key of the creating request. The unique constraint
-- makes the insert itself idempotent per account: in lease mode, where the
-- payment is written outside the idempotency record's transaction, a retry
-- that takes over an expired lease finds the payment instead of charging
-- twice.
--
-- Every statement is idempotent: databases created before the versions
-- table payments_migrations existed already have the table, and get this
-- migration applied (and recorded) once more.
CREATE TABLE IF NOT EXISTS payments (
    id              text        NOT NULL PRIMARY KEY,
    account         text        NOT NULL,
    amount          bigint      NOT NULL CHECK (amount > 0),
    currency        text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    description     text        NOT NULL DEFAULT '',
    idempotency_key text        NOT NULL,
    created_at      timestamptz NOT NULL,
    UNIQUE (account, idempotency_key)
);

-- GET /v1/payments lists one account's payments, oldest first.
CREATE INDEX IF NOT EXISTS payments_account_created_at_idx ON payments (account, created_at, id);
