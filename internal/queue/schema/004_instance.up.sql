-- Where the queue lives: the host and the absolute path of the first open
-- by a client that records it. A copy of the file opened elsewhere does
-- not send the intents started here unless they are adopted (see
-- instance.go).
CREATE TABLE IF NOT EXISTS idemkit_instance (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    host       TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    created_at TEXT    NOT NULL
) STRICT;

-- The instance ("<host>|<path>") that started each intent; NULL for
-- intents queued before this migration, which belong to the recorded one.
ALTER TABLE idemkit_intents ADD COLUMN instance TEXT;
