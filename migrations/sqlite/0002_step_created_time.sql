-- Keel schema v2 (SQLite). Same index as migrations/postgres/0002_step_created_time.sql.
-- The policy actor rebuilds its rate-limit windows at startup from the tool calls allowed in
-- the longest window (`Store::tool_calls_since`): `step.created` events by time.
CREATE INDEX events_step_created_time ON events (timestamp) WHERE type = 'step.created';
