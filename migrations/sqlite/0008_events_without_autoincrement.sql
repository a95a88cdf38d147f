-- Keel schema v8 (SQLite). The writer inserts 29 events per execution of the K=5 job, and two
-- things in the definition of `events` cost it on every one of them without protecting
-- anything a reader relies on (docs/benchmarks.md: together 15 % of SQLite's instructions):
--
-- * `AUTOINCREMENT` makes every INSERT statement read and rewrite the table's row in
--   `sqlite_sequence`. What it guaranteed, a `position` never reused even after retention
--   deletes the newest rows, is now kept by the writer thread: it assigns each event's
--   position itself, one above the highest ever handed out, which is the larger of the
--   highest stored and `event_positions.high_water`. Retention raises the high water to the
--   highest stored position before it deletes anything (src/store/sqlite/positions.rs).
-- * `UNIQUE` on `id` kept an index that no query reads. Event ids are UUIDv7 made by the kernel
--   for each event it seals (actors/src/events/envelope.rs).
--
-- A column constraint cannot be dropped in SQLite, so `events` is rebuilt (SQLite's
-- "Making Other Kinds Of Table Schema Changes"): a new table with the same columns in the same
-- order, every row copied with its position, the old table dropped and the new one renamed.
-- Nothing references `events`, so this needs no change to the foreign-key setting. The copy
-- takes time in proportion to the stored events, once, when a kernel first opens the database.

-- The highest position ever handed out, read before the old table (and its sqlite_sequence
-- row) is dropped.
CREATE TABLE event_positions (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    high_water INTEGER NOT NULL CHECK (high_water >= 0)
);
INSERT INTO event_positions (id, high_water)
SELECT 1, MAX(
    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
    COALESCE((SELECT MAX(position) FROM events), 0)
);

CREATE TABLE events_v8 (
    position        INTEGER PRIMARY KEY,
    id              TEXT    NOT NULL,
    execution_id    TEXT    NOT NULL REFERENCES executions (id),
    sequence        INTEGER NOT NULL CHECK (sequence >= 1),
    step_id         TEXT,
    type            TEXT    NOT NULL,
    schema_version  INTEGER NOT NULL,
    timestamp       TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    causation_id    TEXT    NOT NULL,
    correlation_id  TEXT    NOT NULL,
    idempotency_key TEXT,
    UNIQUE (execution_id, sequence)
);
INSERT INTO events_v8 (position, id, execution_id, sequence, step_id, type, schema_version,
    timestamp, payload, causation_id, correlation_id, idempotency_key)
SELECT position, id, execution_id, sequence, step_id, type, schema_version,
    timestamp, payload, causation_id, correlation_id, idempotency_key
FROM events ORDER BY position;
DROP TABLE events;
ALTER TABLE events_v8 RENAME TO events;

-- The indexes of 0002, 0003 and 0006, as they were.
CREATE INDEX events_step_created_time ON events (timestamp) WHERE type = 'step.created';
CREATE UNIQUE INDEX events_creation_key ON events (idempotency_key)
    WHERE type = 'execution.created' AND idempotency_key IS NOT NULL;
CREATE INDEX events_step_result_time ON events (timestamp)
    WHERE (type = 'step.completed' OR type = 'step.failed' OR type = 'step.timed_out');
