-- Keel schema v6 (PostgreSQL only). PostgreSQL rewrites a row in place, with no new entry in
-- any index (a HOT update), only when no indexed column changes and the row's page has room.
-- `executions_terminal_updated` indexed `updated_at`, which every commit changes, so each of
-- the ~12 commits of an execution added an entry to each of the seven indexes of `executions`.
-- Retention now reads `finished_at`: the time an execution became terminal (its last update),
-- NULL before; a commit that leaves the status alone changes no indexed column.
ALTER TABLE executions ADD COLUMN finished_at timestamptz;
UPDATE executions SET finished_at = updated_at
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX executions_finished ON executions (finished_at, id)
    WHERE finished_at IS NOT NULL;
DROP INDEX executions_terminal_updated;
-- Room on each page for the new versions of its rows.
ALTER TABLE executions SET (fillfactor = 80);
