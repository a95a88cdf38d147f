-- Keel schema v6 (PostgreSQL only; SQLite keeps its REFERENCES, see below).
-- PostgreSQL checks a foreign key with a trigger per inserted row that runs
-- `SELECT 1 FROM executions WHERE id = $1 FOR KEY SHARE`: one query and one row lock for each
-- event, step and label written, about 40 per execution of the K=5 benchmark job and 15–23 % of
-- the server's CPU under it (docs/benchmarks.md). Every row of these tables is written by the
-- store writer's group statement (src/store/postgres/write.rs), which inserts children only for
-- executions whose row the same statement inserted or updated, after `Commit` validation has
-- refused any child naming another execution (`expected_previous_sequence`); retention deletes
-- children before their execution in one transaction. The constraints could never fire.
-- SQLite checks the same references inside the engine, by one index probe per row (2 % of the
-- kernel's instructions), and keeps them.
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_execution_id_fkey;
ALTER TABLE steps DROP CONSTRAINT IF EXISTS steps_execution_id_fkey;
ALTER TABLE execution_labels DROP CONSTRAINT IF EXISTS execution_labels_execution_id_fkey;
