-- Keel schema v8 (PostgreSQL). `events.id` was declared UNIQUE, which kept an index that no
-- query reads and that every inserted event (29 per execution of the K=5 benchmark job) had to
-- enter and check. Event ids are UUIDv7 made by the kernel for each event it seals
-- (actors/src/events/envelope.rs). SQLite drops the same index in its 0008, where it also
-- stops using AUTOINCREMENT; PostgreSQL's BIGSERIAL positions are unchanged.
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_id_key;
