-- Keel schema v21 (PostgreSQL). Same change as migrations/sqlite/0021_event_principal.sql.
-- Who caused each event (docs/security.md, "Who did what"): the key name, `admin` for the
-- bearer token, `anonymous` on a kernel without authentication, `system` for timers and
-- recovery. NULL in events written before this migration (adding a nullable column without a
-- default rewrites nothing).
ALTER TABLE events ADD COLUMN principal TEXT;
