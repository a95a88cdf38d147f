-- Keel schema v1 (PostgreSQL). Same tables, numbers and meaning as migrations/sqlite/0001_init.sql.
-- Times are TIMESTAMPTZ (microsecond precision, like the kernel's timestamps). JSON columns are
-- JSON, not JSONB: JSON keeps the text the kernel wrote, so every value reads back exactly
-- (JSONB rejects strings containing \u0000 and rewrites numbers such as 1e18 as integers).

-- Projection of each execution, written in the same transaction as its events. `id` sorts
-- bytewise (COLLATE "C") so list order matches SQLite whatever the database locale.
CREATE TABLE executions (
    id            TEXT        COLLATE "C" PRIMARY KEY,
    agent_id      TEXT        NOT NULL,
    status        TEXT        NOT NULL CHECK (status IN
                      ('pending', 'running', 'blocked', 'completed', 'failed', 'cancelled')),
    labels        JSON,
    input         JSON        NOT NULL,
    output        JSON,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    session_id    TEXT,
    consumer_id   TEXT,
    last_sequence BIGINT      NOT NULL
);

-- The event log, the source of truth. `position` is a kernel-wide, monotonically increasing
-- offset for a future cross-execution feed. It follows commit order because all writes go
-- through one session, one transaction at a time (src/store/postgres.rs); rolled-back
-- transactions leave gaps.
CREATE TABLE events (
    position        BIGSERIAL   PRIMARY KEY,
    id              TEXT        NOT NULL UNIQUE,
    execution_id    TEXT        NOT NULL REFERENCES executions (id),
    sequence        BIGINT      NOT NULL CHECK (sequence >= 1),
    step_id         TEXT,
    type            TEXT        NOT NULL,
    schema_version  BIGINT      NOT NULL,
    timestamp       TIMESTAMPTZ NOT NULL,
    payload         JSON        NOT NULL,
    causation_id    TEXT        NOT NULL,
    correlation_id  TEXT        NOT NULL,
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
    id           TEXT        PRIMARY KEY,
    execution_id TEXT        NOT NULL REFERENCES executions (id),
    tool_id      TEXT        NOT NULL,
    status       TEXT        NOT NULL CHECK (status IN ('pending', 'dispatched', 'running',
                     'succeeded', 'failed', 'timed_out', 'cancelled')),
    attempt      BIGINT      NOT NULL,
    max_attempts BIGINT      NOT NULL,
    remote       BOOLEAN     NOT NULL,
    job_id       TEXT,
    runner_id    TEXT,
    deadline     TIMESTAMPTZ,
    updated_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX steps_execution ON steps (execution_id);
