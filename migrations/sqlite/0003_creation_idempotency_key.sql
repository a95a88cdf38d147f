-- Keel schema v3 (SQLite). Same indexes as migrations/postgres/0003_creation_idempotency_key.sql.
-- `POST /v0/executions` with an `Idempotency-Key` header stores the key as the idempotency key
-- of the `execution.created` event, in the same commit. A key names one execution kernel-wide
-- for as long as the execution is stored: a second creation with it fails on this index, and
-- the first is found through it.
CREATE UNIQUE INDEX events_creation_key ON events (idempotency_key)
    WHERE type = 'execution.created' AND idempotency_key IS NOT NULL;
-- An agent group loads its queue (pending executions with their priority) at start.
CREATE INDEX executions_pending_agent ON executions (agent_id, created_at, id)
    WHERE status = 'pending';
