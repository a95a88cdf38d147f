-- Keel schema v1 (SQLite). Same tables, numbers and meaning as migrations/postgres/0001_init.sql.
-- Times are RFC 3339 text with exactly six fractional digits and a `Z` suffix
-- (`2026-05-21T14:20:38.123456Z`), so text order is time order. JSON columns hold JSON text.

-- Projection of each execution, written in the same transaction as its events.
CREATE TABLE executions (
    id            TEXT    PRIMARY KEY NOT NULL,
    agent_id      TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN
                      ('pending', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    labels        TEXT,
    input         TEXT    NOT NULL,
    output        TEXT,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    session_id    TEXT,
    consumer_id   TEXT,
    last_sequence INTEGER NOT NULL
);

-- The event log, the source of truth. `position` is a kernel-wide, monotonically increasing
-- offset for a future cross-execution feed (AUTOINCREMENT: never reused, even after
-- retention deletes the newest rows).
CREATE TABLE events (
    position        INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
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

-- Listing: created_at DESC, id DESC, optionally within one status or one agent (WIRE.md §7.2).
CREATE INDEX executions_list ON executions (created_at DESC, id DESC);
CREATE INDEX executions_status_list ON executions (status, created_at DESC, id DESC);
CREATE INDEX executions_agent_list ON executions (agent_id, created_at DESC, id DESC);
-- Recovery: every execution that is not terminal, oldest first.
CREATE INDEX executions_non_terminal ON executions (created_at, id)
    WHERE status NOT IN ('completed', 'failed', 'cancelled');
-- Retention: terminal executions by last update.
CREATE INDEX executions_terminal_updated ON executions (updated_at, id)
    WHERE status IN ('completed', 'failed', 'cancelled');

-- One row per label pair, for `label=key:value` filters.
CREATE TABLE execution_labels (
    execution_id TEXT NOT NULL REFERENCES executions (id),
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    PRIMARY KEY (execution_id, key)
);
CREATE INDEX execution_labels_pair ON execution_labels (key, value, execution_id);

-- Projection of each tool step.
CREATE TABLE steps (
    id           TEXT    PRIMARY KEY NOT NULL,
    execution_id TEXT    NOT NULL REFERENCES executions (id),
    tool_id      TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'dispatched', 'running',
                     'succeeded', 'failed', 'timed_out', 'cancelled')),
    attempt      INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    remote       INTEGER NOT NULL CHECK (remote IN (0, 1)),
    job_id       TEXT,
    runner_id    TEXT,
    deadline     TEXT,
    updated_at   TEXT    NOT NULL
);
CREATE INDEX steps_execution ON steps (execution_id);
