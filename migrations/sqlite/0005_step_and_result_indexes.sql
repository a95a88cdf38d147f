-- Keel schema v5 (SQLite). Same indexes as migrations/postgres/0005_step_and_result_indexes.sql.
-- The circuit breakers are rebuilt at startup (and when a reload lengthens their horizon) from
-- the step results of the horizon (`Store::tool_results_since`): result events by time.
CREATE INDEX events_step_result_time ON events (timestamp)
    WHERE type IN ('step.completed', 'step.failed', 'step.timed_out');
-- `keel_queued_jobs` counts, per tool, the remote steps no runner has started yet
-- (`Store::queue_depths`): only the few live remote steps are in this index.
CREATE INDEX steps_queued_remote ON steps (tool_id)
    WHERE status IN ('pending', 'dispatched') AND remote = 1;
-- A local call of a tool with `concurrency.tools` counts the tool's unfinished local steps
-- (`Store::active_local_steps`).
CREATE INDEX steps_active_local ON steps (tool_id)
    WHERE status IN ('pending', 'dispatched', 'running') AND remote = 0;
