-- Whether the definitive answer meant "key reused", as the host's profile
-- read it when it arrived (see profile.go). Before this column the client
-- decided it from the stored status alone: a 422 that was not a replay.
ALTER TABLE idemkit_intents ADD COLUMN outcome_key_reused INTEGER NOT NULL DEFAULT 0;

UPDATE idemkit_intents SET outcome_key_reused = 1
WHERE state = 'failed' AND outcome_status = 422 AND COALESCE(outcome_replayed, 0) = 0;
