-- Keel schema v4 (PostgreSQL). Same table as migrations/sqlite/0004_webhook_positions.sql.
-- Each webhook subscription's acknowledged position in the kernel-wide event feed: every
-- matching event up to it was delivered (a 2xx answer). A restarted kernel resumes delivery
-- after it, so nothing acknowledged is sent again and nothing unacknowledged is lost.
CREATE TABLE webhook_positions (
    subscription_id TEXT        PRIMARY KEY NOT NULL,
    position        BIGINT      NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL
);
