//! Opening a PostgreSQL store: the writer connection with its lock, the migrations, the
//! cluster marking, and the read-only pool.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use keel_actors::error::StoreError;

use super::super::{PartitionFence, StoreOptions};
use super::schema::{self, migrate, with_session_settings};
use super::writer::Writer;
use super::{PostgresStore, cluster};

impl PostgresStore {
    /// Connects to the database named by `url`, takes the one-kernel-per-database lock and
    /// applies the embedded migrations. The database itself must exist.
    ///
    /// Fails with `Unavailable` when the URL is invalid, the server cannot be reached within
    /// `options.acquire_timeout`, another kernel holds the database, or its schema is newer than
    /// this binary. Error messages name host, port and database, never the password.
    pub async fn open(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        Self::open_fenced(url, options, None).await
    }

    /// Like [`PostgresStore::open`]; with a `fence` (cluster mode) every write is fenced on the
    /// partitions it says this kernel holds.
    pub async fn open_fenced(
        url: &str,
        options: &StoreOptions,
        fence: Option<Arc<dyn PartitionFence>>,
    ) -> Result<Self, StoreError> {
        let base = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Unavailable(format!("invalid postgres url: {error}")))?;
        let base = with_session_settings(base, options);
        let shared = options.cluster_partitions.is_some();
        let writer = Writer::new(schema::writer_settings(base.clone()), options, shared);
        let mut connection = writer.connect_and_lock().await?;
        migrate(&mut connection).await?;
        match options.cluster_partitions {
            Some(partitions) => cluster::ensure_cluster(&mut connection, partitions).await?,
            None => cluster::refuse_cluster(&mut connection).await?,
        }
        writer.install(connection).await;
        let readers = PgPoolOptions::new()
            .max_connections(options.max_read_connections.max(1))
            .min_connections(0)
            .acquire_timeout(options.acquire_timeout)
            // A pooled connection may have died with the server; a round trip before each use
            // replaces it instead of failing the caller.
            .test_before_acquire(true)
            .idle_timeout(Some(Duration::from_secs(60)))
            .connect_lazy_with(base.options([("default_transaction_read_only", "on")]));
        Ok(Self {
            writer,
            readers,
            read_timeout: options.acquire_timeout + options.statement_timeout,
            fence,
        })
    }
}
