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
//! Files: `open.rs` (connecting), `schema.rs` (session settings, migrations, the read columns),
//! `reads.rs` (events, executions, recovery), `commits.rs`, `write.rs`, `round_sql.rs` and
//! `columns.rs` (commits), `retention.rs`, `writer.rs` (the writer connection).

mod cluster;
mod columns;
mod commits;
mod open;
mod reads;
mod retention;
mod round_sql;
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
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgPool;

use keel_actors::error::StoreError;
use keel_actors::events::Event;
use keel_actors::feed::{FeedEvent, FeedQuery};
use keel_actors::ids::{AgentId, ExecutionId, ToolId};
use keel_actors::status::ExecutionStatus;
use keel_actors::store::{
    AllowedToolCall, Batch, Commit, ExecutionRow, ListFilter, PendingApproval, PendingEntry,
    QueueDepths, RecoveryEntry, RunnerToolResult, RunningEntry, Store,
};
use keel_actors::time::Timestamp;

use super::{PG_NON_TERMINAL, PartitionFence, map_sqlx_error};
use schema::EVENT_COLUMNS;
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
        self.write_batch(batch).await
    }

    async fn commit_group(&self, group: Vec<Commit>) -> Vec<Result<(), StoreError>> {
        self.write_group(group).await
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
        self.read_recovery_index(None).await
    }

    async fn recovery_index_of(
        &self,
        partitions: &[u32],
    ) -> Result<Vec<RecoveryEntry>, StoreError> {
        self.read_recovery_index(Some(partitions)).await
    }

    async fn delete_terminal_before(
        &self,
        before: Timestamp,
        limit: i64,
    ) -> Result<u64, StoreError> {
        self.retain(before, limit).await
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
