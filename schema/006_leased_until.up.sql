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
