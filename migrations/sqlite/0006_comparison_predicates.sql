-- Keel schema v6 (SQLite only; PostgreSQL keeps its IN lists, which it evaluates in place).
-- SQLite evaluates `x IN (a, b, c)` with more than two constants by building a temporary
-- b-tree of the list each time the statement runs. A partial index's WHERE is evaluated on
-- every insert and update of its table, so each event, step and execution written paid for
-- one or more of those (about 100 per execution, a quarter of the writer thread's work).
-- The same predicates, as comparisons: queries that read these indexes spell them the same
-- way (src/store/mod.rs, SQLITE_TERMINAL and friends), as SQLite's planner requires.
DROP INDEX executions_non_terminal;
CREATE INDEX executions_non_terminal ON executions (created_at, id)
    WHERE status <> 'completed' AND status <> 'failed' AND status <> 'cancelled';
DROP INDEX executions_terminal_updated;
CREATE INDEX executions_terminal_updated ON executions (updated_at, id)
    WHERE (status = 'completed' OR status = 'failed' OR status = 'cancelled');
DROP INDEX events_step_result_time;
CREATE INDEX events_step_result_time ON events (timestamp)
    WHERE (type = 'step.completed' OR type = 'step.failed' OR type = 'step.timed_out');
DROP INDEX steps_active_local;
CREATE INDEX steps_active_local ON steps (tool_id)
    WHERE (status = 'pending' OR status = 'dispatched' OR status = 'running') AND remote = 0;
