-- The completion UPDATE is the second write of every row. It can stay on
-- the row's page without touching any index (a HOT update) only if it
-- changes no indexed column, no column of an index predicate, and the page
-- has room for the new version:
--
-- * The partial index on locked_until WHERE state = 'in_progress' covered
--   both columns the completion changes. No statement reads through it
--   (leases are taken over by primary key, and the sweep goes by
--   expires_at), so it goes.
-- * fillfactor 70 leaves each page room for the completed versions of the
--   rows inserted into it. It applies to pages written from now on.
DROP INDEX IF EXISTS idempotency_keys_in_progress_idx;
ALTER TABLE idempotency_keys SET (fillfactor = 70);
