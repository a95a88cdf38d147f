-- Keel schema v11 (PostgreSQL only). Cluster mode's fenced writes (docs/architecture.md,
-- "Cluster"): the partition of each execution and the epoch each event was written under.
-- Both stay NULL for a kernel started without --cluster, so its writes are unchanged.
ALTER TABLE executions ADD COLUMN partition INTEGER;
ALTER TABLE events ADD COLUMN epoch BIGINT;

-- The open executions of a partition, for the kernel that acquires it; rows of the one-kernel
-- mode (no partition) stay out of the index.
CREATE INDEX executions_open_by_partition ON executions (partition, created_at)
    WHERE partition IS NOT NULL AND phase IN ('pending', 'active');

-- The partition of an execution id: FNV-1a (32 bits) of its UTF-8 bytes, modulo the partition
-- count. The kernel computes the same in Rust (src/store/mod.rs, `partition_of`); this copy
-- assigns the executions a one-kernel database already holds when it becomes a cluster
-- database.
CREATE FUNCTION keel_partition(id TEXT, partitions INTEGER) RETURNS INTEGER
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    bytes BYTEA := convert_to(id, 'UTF8');
    hash BIGINT := 2166136261;
BEGIN
    FOR i IN 0 .. length(bytes) - 1 LOOP
        hash := ((hash # get_byte(bytes, i)) * 16777619) & 4294967295;
    END LOOP;
    RETURN (hash % partitions)::INTEGER;
END
$$;
