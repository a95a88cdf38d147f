-- Keel schema v7 (SQLite only). The `status IN (...)` CHECKs of 0001 made SQLite build a
-- temporary b-tree on every insert and update of an execution or a step (see 0006). A CHECK
-- cannot be altered, and rebuilding these tables needs foreign keys off, which a migration's
-- transaction cannot do. The two definitions are therefore rewritten in place, as SQLite's
-- documentation describes for changing CHECK constraints ("Making Other Kinds Of Table Schema
-- Changes"): same columns in the same order, the same allowed statuses spelled as comparisons.
-- The rows on disk do not change; the CREATE/DROP below bumps the schema cookie so every
-- connection re-reads the definitions.
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = 'CREATE TABLE executions (
    id            TEXT    PRIMARY KEY NOT NULL,
    agent_id      TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status = ''pending'' OR status = ''running''
                      OR status = ''blocked'' OR status = ''completed'' OR status = ''failed''
                      OR status = ''cancelled''),
    labels        TEXT,
    input         TEXT    NOT NULL,
    output        TEXT,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    session_id    TEXT,
    consumer_id   TEXT,
    last_sequence INTEGER NOT NULL
)'
WHERE type = 'table' AND name = 'executions';
UPDATE sqlite_master SET sql = 'CREATE TABLE steps (
    id           TEXT    PRIMARY KEY NOT NULL,
    execution_id TEXT    NOT NULL REFERENCES executions (id),
    tool_id      TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status = ''pending'' OR status = ''dispatched''
                     OR status = ''running'' OR status = ''succeeded'' OR status = ''failed''
                     OR status = ''timed_out'' OR status = ''cancelled''),
    attempt      INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    remote       INTEGER NOT NULL CHECK (remote IN (0, 1)),
    job_id       TEXT,
    runner_id    TEXT,
    deadline     TEXT,
    updated_at   TEXT    NOT NULL
)'
WHERE type = 'table' AND name = 'steps';
PRAGMA writable_schema = OFF;
CREATE TABLE keel_schema_v7 (done INTEGER);
DROP TABLE keel_schema_v7;
