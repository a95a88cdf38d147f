-- Keel schema v7 (PostgreSQL only; SQLite has no heap-only updates and keeps its indexes).
-- Every commit of an execution updates its `executions` row, and an execution on a step flips
-- between `running` and `blocked` on nearly every commit (K=5 job: 12 updates per execution,
-- 10 of them such a flip). PostgreSQL can keep an update on the row's own page without touching
-- any index (a heap-only tuple, HOT) only when no column that an index reads, in its keys or its
-- predicate, changes. Four indexes read `status` and one `updated_at`, so no update was HOT and
-- each one inserted an entry into every index of the table whose predicate the row met.
--
-- The indexes now read two generated columns instead, which change only when an execution
-- changes phase (pending → active → terminal), not when it flips between running and blocked:
--   phase        'pending', 'active' (running or blocked), or the terminal status;
--   finished_at  `updated_at` once the status is terminal, else NULL (retention's order).
-- The readers ask for the phase (and the exact status on top where it matters): see
-- src/store/postgres.rs, reads.rs, creation.rs, depths.rs and overview.rs.
--
-- fillfactor 70 leaves room on each page for the new versions of its rows. Measured under the
-- K=5 job: 99 % of the updates HOT, PostgreSQL's CPU per execution −26 % (docs/benchmarks.md).
-- Adding stored generated columns rewrites the table once, under an exclusive lock.
ALTER TABLE executions
    ADD COLUMN phase TEXT GENERATED ALWAYS AS (
        CASE WHEN status IN ('running', 'blocked') THEN 'active' ELSE status END) STORED,
    ADD COLUMN finished_at TIMESTAMPTZ GENERATED ALWAYS AS (
        CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN updated_at END) STORED;

DROP INDEX executions_status_list;
DROP INDEX executions_non_terminal;
DROP INDEX executions_pending_agent;
DROP INDEX executions_terminal_updated;

-- Listing by status: the phase, then the exact status as a filter (running and blocked share
-- the `active` entries).
CREATE INDEX executions_phase_list ON executions (phase, created_at DESC, id DESC);
-- Recovery: every execution that is not terminal, oldest first.
CREATE INDEX executions_non_terminal ON executions (created_at, id)
    WHERE phase IN ('pending', 'active');
-- An agent group loads its queue (pending executions with their priority) at start.
CREATE INDEX executions_pending_agent ON executions (agent_id, created_at, id)
    WHERE phase = 'pending';
-- Retention: terminal executions by the time they finished.
CREATE INDEX executions_finished ON executions (finished_at, id)
    WHERE finished_at IS NOT NULL;

ALTER TABLE executions SET (fillfactor = 70);
