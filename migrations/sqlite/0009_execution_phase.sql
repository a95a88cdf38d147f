-- Keel schema v9 (SQLite). The indexes of `executions` read two columns that change only when an
-- execution changes phase, not on every commit, as PostgreSQL's have since its 0007.
--
-- Every commit of an execution updates its row, and an execution on a step flips between
-- `running` and `blocked` on nearly every commit (the K=5 job: 12 updates per execution, 10 of
-- them such a flip). SQLite rewrites an index entry on UPDATE when a column the index reads, in
-- its key or in its WHERE, is in the SET list. Four indexes read `status` and one `updated_at`,
-- so every flip deleted and re-inserted the row's entries in `executions_status_list` and
-- `executions_non_terminal` (the same key, both times) and evaluated the predicates of
-- `executions_pending_agent` and `executions_terminal_updated` twice: 57 % of the instructions
-- of writing a commit's rows under that job (docs/benchmarks.md).
--
--   phase        'pending', 'active' (running or blocked), or the terminal status; written by
--                the kernel with the status, and left out of an UPDATE that keeps it, so a flip
--                between running and blocked touches no index.
--   finished_at  `updated_at` once the status is terminal, else NULL (retention's order).
--
-- The CHECKs tie both to `status`, so neither can disagree with it. Existing rows are filled in
-- below. The readers ask for the phase (and for the exact status on top where it matters), in the
-- same words as these index predicates (src/store/mod.rs, SQLITE_NON_TERMINAL, SQLITE_PENDING).
ALTER TABLE executions ADD COLUMN phase TEXT
    CHECK (phase = CASE WHEN status = 'running' OR status = 'blocked' THEN 'active' ELSE status END);
ALTER TABLE executions ADD COLUMN finished_at TEXT
    CHECK (finished_at IS NULL OR status = 'completed' OR status = 'failed' OR status = 'cancelled');

UPDATE executions SET
    phase = CASE WHEN status = 'running' OR status = 'blocked' THEN 'active' ELSE status END,
    finished_at = CASE WHEN status = 'completed' OR status = 'failed' OR status = 'cancelled'
        THEN updated_at END;

DROP INDEX executions_status_list;
DROP INDEX executions_non_terminal;
DROP INDEX executions_pending_agent;
DROP INDEX executions_terminal_updated;

-- Listing by status: the phase, then the exact status as a filter (running and blocked share
-- the `active` entries).
CREATE INDEX executions_phase_list ON executions (phase, created_at DESC, id DESC);
-- Recovery: every execution that is not terminal, oldest first.
CREATE INDEX executions_non_terminal ON executions (created_at, id)
    WHERE (phase = 'pending' OR phase = 'active');
-- An agent group loads its queue (pending executions with their priority) at start.
CREATE INDEX executions_pending_agent ON executions (agent_id, created_at, id)
    WHERE phase = 'pending';
-- Retention: terminal executions by the time they finished.
CREATE INDEX executions_finished ON executions (finished_at, id)
    WHERE finished_at IS NOT NULL;
