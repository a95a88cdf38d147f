-- Keel schema v10 (PostgreSQL only; SQLite stays a single-kernel backend). Several kernels on
-- one database (`keel serve --cluster`, docs/architecture.md "Cluster").
--
-- cluster_meta: one row, written by the first cluster kernel; its presence marks the database
-- as a cluster database (a kernel started without --cluster refuses it). `partitions` is P,
-- fixed for the life of the database.
CREATE TABLE cluster_meta (
    singleton  BOOLEAN     PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    partitions INTEGER     NOT NULL CHECK (partitions > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- nodes: one row per kernel id. `incarnation` grows at every start of that id (a second
-- process with the same id supersedes the first); `heartbeat` is stamped with the database's
-- now(), never a kernel's clock.
CREATE TABLE nodes (
    id          TEXT        PRIMARY KEY NOT NULL,
    incarnation BIGINT      NOT NULL,
    url         TEXT        NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- partitions: P rows (0..P-1). A kernel acquires a partition whose lease has expired with a
-- compare-and-set that increments `epoch`; writes are fenced on (owner, owner_incarnation,
-- epoch). A released partition keeps its owner and epoch, with its lease expired.
CREATE TABLE partitions (
    id                INTEGER     PRIMARY KEY NOT NULL,
    owner             TEXT,
    owner_incarnation BIGINT,
    epoch             BIGINT      NOT NULL DEFAULT 0,
    lease_expires_at  TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    acquired_at       TIMESTAMPTZ
);
