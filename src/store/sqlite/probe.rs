//! Readiness of a SQLite store: can the kernel write right now? A `SELECT 1` on a read
//! connection answers even while another process holds the write lock (WAL readers never
//! wait), so `/v0/ready` would say ready while every write fails after `busy_timeout`. The
//! probe instead takes the write lock on a connection of its own (`BEGIN IMMEDIATE`, then
//! `ROLLBACK`: nothing is written) and gives up after [`PROBE_BUSY_TIMEOUT`], well inside the
//! 2 s in which readiness must report an outage. The kernel's own commits hold the lock for
//! milliseconds, so they never make the probe fail.

use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::{BEGIN_WRITE, StoreError, map_sqlx_error};

/// How long the probe waits for a write lock held elsewhere before reporting `Unavailable`.
pub(super) const PROBE_BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// Returns the probe's pool: one read-write connection, opened on first use. It is never the
/// last connection to the file (the writer stays connected), so closing it never checkpoints.
pub(super) fn pool(base: &SqliteConnectOptions, busy_timeout: Duration) -> SqlitePool {
    let busy_timeout = busy_timeout.min(PROBE_BUSY_TIMEOUT);
    SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(PROBE_BUSY_TIMEOUT)
        .connect_lazy_with(base.clone().busy_timeout(busy_timeout))
}

/// Takes and releases the write lock; `Unavailable` when it is held elsewhere, or when the file
/// cannot be opened for writing.
pub(super) async fn writable(pool: &SqlitePool) -> Result<(), StoreError> {
    let transaction = pool.begin_with(BEGIN_WRITE).await.map_err(map_sqlx_error)?;
    transaction.rollback().await.map_err(map_sqlx_error)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use keel_actors::store::Store;
    use sqlx::{Connection, SqliteConnection};

    use super::super::{SqliteStore, StoreOptions};
    use super::*;

    #[tokio::test]
    async fn a_write_lock_held_elsewhere_fails_the_ping_within_the_probe_timeout_until_released() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("keel.db");
        let store = SqliteStore::open(&path, &StoreOptions::default())
            .await
            .expect("open");
        store.ping().await.expect("ready before the lock");

        let mut other =
            SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(&path))
                .await
                .expect("connect");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut other)
            .await
            .expect("lock");
        let started = Instant::now();
        let result = store.ping().await;
        assert!(
            matches!(result, Err(StoreError::Unavailable(_))),
            "got {result:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "ping took {:?}",
            started.elapsed()
        );

        sqlx::query("ROLLBACK")
            .execute(&mut other)
            .await
            .expect("unlock");
        store.ping().await.expect("ready once the lock is released");
        store.close().await;
        assert!(
            matches!(store.ping().await, Err(StoreError::Unavailable(_))),
            "a closed store is not ready"
        );
    }
}
