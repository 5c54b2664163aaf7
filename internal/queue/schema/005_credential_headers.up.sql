-- The names (never the values) of the credential headers each intent's
-- request had, as a JSON array of canonical names: a process resuming the
-- intent can tell it needs them. NULL: none, or queued before 005.
ALTER TABLE idemkit_intents ADD COLUMN credential_headers TEXT;
