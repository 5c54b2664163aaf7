-- The holder of an intent's lease: "<host>/<pid>/<start>" (see owner.go),
-- set by every claim and every attempt, NULL once the lease is released or
-- the intent ended. A process on the same host takes the lease of a dead
-- holder over at once instead of waiting for it to run out.
ALTER TABLE idemkit_intents ADD COLUMN lease_owner TEXT;

-- The live leases, by holder: the takeover lookup reads this (a few rows:
-- one per intent in flight), never the whole queue.
CREATE INDEX IF NOT EXISTS idemkit_intents_leased ON idemkit_intents (lease_owner)
    WHERE state = 'pending' AND lease_owner IS NOT NULL;

-- A claim that moves the fencing token without naming a holder (a client
-- from before this migration, sharing the queue file) must not leave the
-- previous holder's name on a lease it no longer holds: another process
-- could find that holder dead and take over a lease that is live.
CREATE TRIGGER IF NOT EXISTS idemkit_intents_owner_fenced
AFTER UPDATE OF lease_token ON idemkit_intents
WHEN NEW.lease_token <> OLD.lease_token AND NEW.lease_owner IS OLD.lease_owner AND OLD.lease_owner IS NOT NULL
BEGIN
    UPDATE idemkit_intents SET lease_owner = NULL WHERE id = NEW.id;
END;
