//! PostgreSQL implementation of the storage port, built by [`super::open`] for `postgres://` and
//! `postgresql://` URLs.
//!
//! Connections: one dedicated writer connection (`writer.rs`) that holds the kernel's
//! session-level advisory lock and runs every write (`commit`, retention), plus a pool of
//! read-only connections for everything else. Because the kernel has a single writer (the
//! `StoreWriter` actor, one transaction in flight) and this adapter writes through one session,
//! transactions commit one after another and `events.position` (a sequence) increases in commit
//! order; rolled-back transactions may leave gaps, which a feed resuming "after position P"
//! tolerates. In cluster mode several kernels write at once, and positions follow the writing
//! transaction's id instead (`feed.rs`).
//!
//! Outages: every operation is bounded (`acquire_timeout` to get or re-establish a connection,
//! `statement_timeout` for the work, server-side and client-side) and connection trouble maps
//! to `Unavailable`. The read pool tests connections before handing them out and the writer
//! reconnects (and re-takes its lock) on the next call, so the store recovers by itself when the
//! database returns.
//!
//! The URL must reach a real session (directly, or through a session-mode pooler): a
//! transaction-mode pooler would break the session lock and prepared statements.
//!
//! Files: `schema.rs` (session settings, migrations, the read columns), `reads.rs` (events and
//! executions), `write.rs` and `columns.rs` (commits), `writer.rs` (the writer connection).

mod cluster;
mod columns;
mod reads;
mod schema;
mod write;
mod writer;

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod feed_tests;
#[cfg(test)]
mod hot_tests;
#[cfg(test)]
mod outage_tests;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod test_db;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::feed::{FeedEvent, FeedQuery};
use keel_actors::ids::{AgentId, ExecutionId, ToolId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{
    AllowedToolCall, Batch, Commit, ExecutionRow, ListFilter, PendingApproval, PendingEntry,
    QueueDepths, RecoveryEntry, RunnerToolResult, RunningEntry, Store,
};
use keel_actors::time::{self, Timestamp};

use super::{PG_NON_TERMINAL, PartitionFence, StoreOptions, map_sqlx_error};
use schema::{EVENT_COLUMNS, migrate, with_session_settings};
#[cfg(test)]
use schema::{MIGRATOR, STEP_COLUMNS};
use writer::Writer;

pub use cluster::{CLUSTER_DATABASE, Membership, NodeRow, PartitionRow, SINGLE_KERNEL_DATABASE};

/// `ping` answers within this bound, so `/v0/ready` reports an outage within 2 s.
const PING_TIMEOUT: Duration = Duration::from_millis(1500);

/// Cluster mode: the partition whose holder is elected for singleton work (retention here,
/// webhook delivery in `crate::app`).
pub const SINGLETON_PARTITION: u32 = 0;

/// Cluster mode: how often a feed reader reads again without a local commit notice (other
/// kernels' commits, and events held back by the horizon, produce none here).
const FEED_POLL_INTERVAL: Duration = Duration::from_millis(250);

/// Cluster mode with notifications: the feed readers' poll is only a safety net.
const FEED_SAFETY_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The PostgreSQL store: a dedicated writer connection holding the kernel lock and a
/// read-only pool.
#[derive(Debug)]
pub struct PostgresStore {
    writer: Writer,
    readers: PgPool,
    /// Client-side bound of one read, on top of the server's `statement_timeout`.
    read_timeout: Duration,
    /// Cluster mode: the partitions this kernel holds; every write is fenced on them.
    fence: Option<Arc<dyn PartitionFence>>,
}

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

    /// Which events a feed read may see: in cluster mode only those below the horizon
    /// (`super::feed`), as other kernels commit concurrently.
    fn feed_visibility(&self) -> super::feed::Visibility {
        if self.fence.is_some() {
            super::feed::Visibility::BelowHorizon
        } else {
            super::feed::Visibility::All
        }
    }

    /// After a commit (never inside its transaction): cluster mode notifies the other kernels.
    fn committed(&self) {
        if let Some(fence) = &self.fence {
            fence.committed();
        }
    }

    /// Returns the read pool, for tests that inspect the database.
    #[cfg(test)]
    pub(crate) fn readers(&self) -> &PgPool {
        &self.readers
    }

    /// Runs one read, failing with `Unavailable` when it outlives `read_timeout`.
    async fn bounded<T>(
        &self,
        read: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.read_timeout, read).await {
            Ok(result) => result.map_err(map_sqlx_error),
            Err(_) => Err(StoreError::Unavailable(format!(
                "database read did not finish within {} ms",
                self.read_timeout.as_millis()
            ))),
        }
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn commit(&self, batch: &[Commit]) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut pending = Vec::with_capacity(batch.len());
        for (index, checked) in write::check(batch).into_iter().enumerate() {
            pending.push((index, checked?));
        }
        let mut checkout = self.writer.checkout().await?;
        let outcome = self
            .writer
            .bounded(write::commit_all(
                checkout.connection(),
                batch,
                pending,
                self.fence.as_deref(),
            ))
            .await;
        let outcome = checkout.finish(outcome);
        if outcome.is_ok() {
            self.committed();
        }
        outcome
    }

    async fn commit_group(&self, group: Vec<Commit>) -> Vec<Result<(), StoreError>> {
        let mut results = Vec::with_capacity(group.len());
        let mut pending = Vec::with_capacity(group.len());
        for (index, checked) in write::check(&group).into_iter().enumerate() {
            match checked {
                Ok(previous) => {
                    pending.push((index, previous));
                    results.push(Ok(()));
                }
                Err(error) => results.push(Err(error)),
            }
        }
        if pending.is_empty() {
            return results;
        }
        let outcome = match self.writer.checkout().await {
            Ok(mut checkout) => {
                let outcome = self
                    .writer
                    .bounded(write::commit_group(
                        checkout.connection(),
                        &group,
                        &mut results,
                        &mut pending,
                        self.fence.as_deref(),
                    ))
                    .await;
                checkout.finish(outcome)
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {}
            Err(StoreError::Unavailable(reason)) => {
                for (index, _) in pending {
                    results[index] = Err(StoreError::Unavailable(reason.clone()));
                }
            }
            // The statement failed for one of its commits (say a reused event id): each of
            // the commits it did not write is committed alone, so that one fails alone.
            Err(_) => {
                for (index, _) in pending {
                    results[index] = self.commit(std::slice::from_ref(&group[index])).await;
                }
            }
        }
        if results.iter().any(Result::is_ok) {
            self.committed();
        }
        results
    }

    async fn events(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
    ) -> Result<Vec<Event>, StoreError> {
        self.read_events(id, after_sequence, limit).await
    }

    async fn events_within(
        &self,
        id: &ExecutionId,
        after_sequence: i64,
        limit: i64,
        max_bytes: i64,
    ) -> Result<Batch<Event>, StoreError> {
        self.read_events_within(id, after_sequence, limit, max_bytes)
            .await
    }

    async fn execution(&self, id: &ExecutionId) -> Result<Option<ExecutionRow>, StoreError> {
        self.read_execution(id).await
    }

    async fn list_executions(&self, filter: &ListFilter) -> Result<Vec<ExecutionRow>, StoreError> {
        self.read_list(filter).await
    }

    async fn non_terminal_executions(&self) -> Result<Vec<ExecutionId>, StoreError> {
        let sql =
            format!("SELECT id FROM executions WHERE {PG_NON_TERMINAL} ORDER BY created_at, id");
        let ids = self
            .bounded(sqlx::query_scalar::<_, String>(&sql).fetch_all(&self.readers))
            .await?;
        Ok(ids.into_iter().map(ExecutionId::new).collect())
    }

    async fn recovery_index(&self) -> Result<Vec<RecoveryEntry>, StoreError> {
        let non_terminal = format!("e.{PG_NON_TERMINAL}");
        let sql = super::recovery::query(schema::RECOVERY_CREATED_AT, &non_terminal, "");
        let records = self
            .bounded(
                sqlx::query_as::<_, super::recovery::RecoveryRecord>(&sql).fetch_all(&self.readers),
            )
            .await?;
        records
            .into_iter()
            .map(|record| record.into_entry())
            .collect()
    }

    async fn recovery_index_of(
        &self,
        partitions: &[u32],
    ) -> Result<Vec<RecoveryEntry>, StoreError> {
        // Matches the predicate of `executions_open_by_partition` (migration 0011).
        let open =
            format!("e.partition = ANY($1) AND e.partition IS NOT NULL AND e.{PG_NON_TERMINAL}");
        let sql = super::recovery::query(schema::RECOVERY_CREATED_AT, &open, "");
        let ids: Vec<i32> = partitions
            .iter()
            .filter_map(|id| i32::try_from(*id).ok())
            .collect();
        let records = self
            .bounded(
                sqlx::query_as::<_, super::recovery::RecoveryRecord>(&sql)
                    .bind(ids)
                    .fetch_all(&self.readers),
            )
            .await?;
        records
            .into_iter()
            .map(|record| record.into_entry())
            .collect()
    }

    async fn delete_terminal_before(
        &self,
        before: Timestamp,
        limit: i64,
    ) -> Result<u64, StoreError> {
        // Cluster mode: retention is singleton work, done by the kernel holding partition 0
        // (docs/architecture.md, "Cluster"); the others delete nothing.
        if let Some(fence) = &self.fence
            && fence.epoch(SINGLETON_PARTITION).is_none()
        {
            return Ok(0);
        }
        let mut checkout = self.writer.checkout().await?;
        let outcome = self
            .writer
            .bounded(write::delete_terminal_before(
                checkout.connection(),
                &time::format(&before),
                limit.max(0),
            ))
            .await;
        checkout.finish(outcome)
    }

    async fn tool_calls_since(&self, since: Timestamp) -> Result<Vec<AllowedToolCall>, StoreError> {
        let rows = self
            .bounded(super::tool_calls::postgres(&self.readers, since))
            .await?;
        super::tool_calls::postgres_calls(rows)
    }

    async fn count_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<(ExecutionStatus, u64)>, StoreError> {
        let rows = self
            .bounded(super::overview::postgres_counts(&self.readers, filter))
            .await?;
        super::overview::into_counts(rows)
    }

    async fn pending_approvals(&self, limit: i64) -> Result<Vec<PendingApproval>, StoreError> {
        let rows = self
            .bounded(super::overview::postgres_approvals(&self.readers, limit))
            .await?;
        super::overview::into_approvals(rows)
    }

    async fn tool_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<keel_actors::store::ToolResult>, StoreError> {
        let rows = self
            .bounded(super::tool_results::postgres(&self.readers, since))
            .await?;
        super::tool_results::rows(rows)
    }

    async fn runner_results_since(
        &self,
        since: Timestamp,
    ) -> Result<Vec<RunnerToolResult>, StoreError> {
        let rows = self
            .bounded(super::tool_results::postgres_runners(&self.readers, since))
            .await?;
        super::tool_results::runner_rows(rows)
    }

    async fn execution_by_creation_key(
        &self,
        key: &str,
    ) -> Result<Option<ExecutionId>, StoreError> {
        let id = self
            .bounded(super::creation::postgres_by_key(&self.readers, key))
            .await?;
        Ok(id.map(ExecutionId::new))
    }

    async fn pending_count(&self, agent_id: Option<&AgentId>) -> Result<u64, StoreError> {
        let agent_id = agent_id.map(AgentId::as_str);
        let count = self
            .bounded(super::creation::postgres_count(&self.readers, agent_id))
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn pending_queue(&self, agent_id: &AgentId) -> Result<Vec<PendingEntry>, StoreError> {
        let read = super::creation::postgres_pending(&self.readers, agent_id.as_str());
        let rows = self.bounded(read).await?;
        super::creation::into_queue(rows)
    }

    async fn active_local_steps(&self, tool_id: &ToolId) -> Result<u64, StoreError> {
        let read = super::creation::postgres_local_steps(&self.readers, tool_id.as_str());
        let count = self.bounded(read).await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn running_executions(
        &self,
        agent_id: &AgentId,
    ) -> Result<Vec<RunningEntry>, StoreError> {
        let read = super::creation::postgres_running(&self.readers, agent_id.as_str());
        let rows = self.bounded(read).await?;
        super::creation::into_running(rows)
    }

    async fn queue_depths(&self) -> Result<QueueDepths, StoreError> {
        self.bounded(super::depths::postgres(&self.readers)).await
    }

    async fn feed(&self, query: &FeedQuery) -> Result<Batch<FeedEvent>, StoreError> {
        let records = self
            .bounded(super::feed::postgres_feed(
                &self.readers,
                EVENT_COLUMNS,
                query,
                self.feed_visibility(),
            ))
            .await?;
        super::feed::postgres_events(records, query)
    }

    fn feed_poll_interval(&self) -> Option<Duration> {
        let fence = self.fence.as_ref()?;
        // With notifications the poll is only a safety net.
        Some(match fence.commit_wakeups() {
            Some(_) => FEED_SAFETY_POLL_INTERVAL,
            None => FEED_POLL_INTERVAL,
        })
    }

    fn feed_wakeups(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.fence.as_ref()?.commit_wakeups()
    }

    async fn head_position(&self) -> Result<i64, StoreError> {
        self.bounded(super::feed::postgres_head(
            &self.readers,
            self.feed_visibility(),
        ))
        .await
    }

    async fn webhook_positions(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.bounded(super::feed::postgres_webhook_positions(&self.readers))
            .await
    }

    async fn set_webhook_position(&self, id: &str, position: i64) -> Result<(), StoreError> {
        let mut checkout = self.writer.checkout().await?;
        let outcome = self
            .writer
            .bounded(super::feed::postgres_set_webhook_position(
                checkout.connection(),
                id,
                position,
            ))
            .await;
        checkout.finish(outcome)
    }

    async fn api_keys(&self) -> Result<Vec<keel_actors::store::StoredKey>, StoreError> {
        match tokio::time::timeout(self.read_timeout, super::keys::postgres_keys(&self.readers))
            .await
        {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(
                "database read of the API keys did not finish in time".to_owned(),
            )),
        }
    }

    async fn put_api_keys(&self, keys: &[keel_actors::store::StoredKey]) -> Result<(), StoreError> {
        let mut checkout = self.writer.checkout().await?;
        let outcome = self
            .writer
            .bounded(super::keys::postgres_put_keys(checkout.connection(), keys))
            .await;
        checkout.finish(outcome)
    }

    /// Closes the read pool and the writer connection, releasing the kernel lock so another
    /// kernel can open the database at once. Later calls fail with `Unavailable`.
    async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let check = async {
            sqlx::query("SELECT 1")
                .execute(&self.readers)
                .await
                .map_err(map_sqlx_error)?;
            self.writer.check().await
        };
        match tokio::time::timeout(PING_TIMEOUT, check).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "database did not answer within {} ms",
                PING_TIMEOUT.as_millis()
            ))),
        }
    }
}
