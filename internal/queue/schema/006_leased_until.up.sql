-- "Due" and "leased until" are two columns. next_attempt_at is the due time
-- only (when the next attempt may start); leased_until is the end of the
-- lease of the process sending the intent, NULL when no process holds it.
-- An intent can be claimed once both have passed.
--
-- Before this migration next_attempt_at held the lease end while leased.
-- A leased row (a named holder) keeps that time as both: it becomes due when
-- the lease runs out, as before. Rows leased by a client from before 002
-- (no holder named) stay due at their lease end, which is what they meant.
ALTER TABLE idemkit_intents ADD COLUMN leased_until TEXT;

UPDATE idemkit_intents SET leased_until = next_attempt_at
WHERE state = 'pending' AND lease_owner IS NOT NULL;

-- A client from before this migration, sharing the queue file, would claim
-- an intent by its due time alone, taking over a lease that is live: it
-- must not. A claim (a new fencing token) is refused while the lease runs,
-- by the claimer's own clock (the updated_at it writes). This package
-- claims only intents whose lease has ended, and takeovers end a dead
-- holder's lease first, so its claims always pass.
CREATE TRIGGER IF NOT EXISTS idemkit_intents_lease_held
BEFORE UPDATE OF lease_token ON idemkit_intents
WHEN NEW.lease_token <> OLD.lease_token AND OLD.leased_until IS NOT NULL AND OLD.leased_until > NEW.updated_at
BEGIN
    SELECT RAISE(ABORT, 'idemkit: the intent is leased (leased_until): a client older than queue schema 6 cannot claim it; upgrade it');
END;
