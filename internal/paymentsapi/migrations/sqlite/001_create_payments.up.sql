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
-- created_at is fixed-width RFC 3339 UTC text with milliseconds
-- (2006-01-02T15:04:05.000Z), so that text order is time order.
--
-- Every statement is idempotent: databases created before the versions
-- table payments_migrations existed already have the table, and get this
-- migration applied (and recorded) once more.
CREATE TABLE IF NOT EXISTS payments (
    id              TEXT    NOT NULL PRIMARY KEY,
    account         TEXT    NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT    NOT NULL CHECK (length(currency) = 3),
    description     TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,
    UNIQUE (account, idempotency_key)
) STRICT;

-- GET /v1/payments lists one account's payments, oldest first.
CREATE INDEX IF NOT EXISTS payments_account_created_at_idx ON payments (account, created_at, id);
