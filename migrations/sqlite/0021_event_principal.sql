-- Keel schema v21 (SQLite). Same change as migrations/postgres/0021_event_principal.sql.
-- Who caused each event (docs/security.md, "Who did what"): the key name, `admin` for the
-- bearer token, `anonymous` on a kernel without authentication, `system` for timers and
-- recovery. NULL in events written before this migration.
ALTER TABLE events ADD COLUMN principal TEXT;
