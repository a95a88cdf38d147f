-- Keel schema v20 (SQLite). Same table as migrations/postgres/0020_api_keys.sql.
-- API keys (docs/security.md): looked up by their public id, unique by name. `record` holds
-- the role, scopes, SHA-256 of the secret (never the secret), expiry, revocation and last use,
-- as JSON written by the kernel's HTTP layer.
CREATE TABLE api_keys (
    public_id  TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL UNIQUE,
    record     TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
